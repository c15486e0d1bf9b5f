"""Prompt records (what a ``data=<name>`` plugin's :class:`~rlloom.protocols.PromptDataset` holds), the
plain train/val container of them (:class:`Splits`, with the seeded split of a finite problem set that
the in-tree datasets share), and turning prompts into token batches.

Importing this module does not import torch (a dataset plugin's registration stays light); the
encoder and the iterator import it when they run."""

from __future__ import annotations

import random
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, TypeVar

if TYPE_CHECKING:
    from rlloom.batch import Batch


@dataclass(frozen=True)
class PromptRecord:
    """One prompt with what is needed to score answers to it.

    - ``prompt``: a list of chat messages (``[{"role": "user", "content": ...}]``, rendered with the
      tokenizer's chat template) or a plain string (tokenized as is).
    - ``ground_truth``: whatever the reward function of ``data_source`` compares against.
    - ``data_source``: the task name (metrics are reported per source).
    - ``extra``: anything else a verifier needs (e.g. a reasoning-gym entry).
    """

    prompt: list[dict[str, str]] | str
    ground_truth: Any
    data_source: str
    extra: dict[str, Any] = field(default_factory=dict)


T = TypeVar("T")


@dataclass(frozen=True)
class Splits:
    """Disjoint ``train`` and ``val`` prompts, in a fixed order (a :class:`rlloom.protocols.PromptDataset`)."""

    train: list[PromptRecord]
    val: list[PromptRecord]


def seeded_split(items: Sequence[T], seed: int, num_val: int, num_train: int, name: str) -> tuple[list[T], list[T]]:
    """``(train, val)``: ``items`` shuffled by ``random.Random(seed).shuffle``; the first ``num_val``
    are val, the next ``num_train`` are train (``num_train == 0``: all the rest).

    Raises ``ValueError`` (naming the dataset ``name``) when a size is negative, when
    ``num_val + num_train`` exceeds ``len(items)``, or when no training item is left.
    """
    if num_val < 0 or num_train < 0:
        raise ValueError(f"data={name}: num_val={num_val} and num_train={num_train} must be >= 0")
    if num_val + num_train > len(items):
        raise ValueError(
            f"data={name}: num_val + num_train = {num_val} + {num_train} = {num_val + num_train} exceeds "
            f"the {len(items)} distinct problems of this config"
        )
    if num_train == 0 and num_val >= len(items):
        raise ValueError(f"data={name}: num_val={num_val} leaves none of the {len(items)} problems for training")
    order = list(items)
    random.Random(seed).shuffle(order)
    val = order[:num_val]
    train = order[num_val : num_val + num_train] if num_train else order[num_val:]
    return train, val


class PromptEncoder:
    """Turns :class:`PromptRecord`s into a left-padded prompt :class:`Batch`.

    Chat prompts are rendered with the tokenizer's own chat template (generation prompt added);
    string prompts are tokenized as they are. Records whose prompt has more than
    ``max_prompt_length`` tokens are dropped by :meth:`filter` (counted by the caller).

    Output fields: ``prompts`` [B, P] int64 (left-padded with the pad id), ``prompt_mask`` [B, P],
    objects ``prompt_text``, ``ground_truth``, ``data_source``, ``extra``.
    """

    def __init__(self, tokenizer: Any, max_prompt_length: int) -> None:
        self.tokenizer = tokenizer
        self.max_prompt_length = max_prompt_length
        if tokenizer.pad_token_id is None:
            raise ValueError("the tokenizer has no pad token; set one in the model folder's tokenizer config")

    def render(self, record: PromptRecord) -> str:
        if isinstance(record.prompt, str):
            return record.prompt
        return self.tokenizer.apply_chat_template(record.prompt, tokenize=False, add_generation_prompt=True)

    def token_ids(self, record: PromptRecord) -> list[int]:
        return self.tokenizer(self.render(record), add_special_tokens=False)["input_ids"]

    def filter(self, records: list[PromptRecord]) -> list[PromptRecord]:
        """The records whose prompt fits in ``max_prompt_length`` tokens."""
        return [record for record in records if len(self.token_ids(record)) <= self.max_prompt_length]

    def encode(self, records: list[PromptRecord]) -> Batch:
        import torch

        from rlloom.batch import Batch

        ids = [self.token_ids(record) for record in records]
        width = max(len(row) for row in ids)
        prompts = torch.full((len(ids), width), self.tokenizer.pad_token_id, dtype=torch.long)
        mask = torch.zeros((len(ids), width), dtype=torch.long)
        for i, row in enumerate(ids):
            if row:
                prompts[i, width - len(row):] = torch.tensor(row, dtype=torch.long)
                mask[i, width - len(row):] = 1
        return Batch(
            {"prompts": prompts, "prompt_mask": mask},
            {
                "prompt_text": [self.render(record) for record in records],
                "ground_truth": [record.ground_truth for record in records],
                "data_source": [record.data_source for record in records],
                "extra": [record.extra for record in records],
            },
        )


class PromptIterator:
    """Endless batches of training prompts: each epoch is a fresh permutation drawn from ``seed``.

    ``state()`` / ``load_state()`` give the position (epoch, offset) for checkpoints.
    """

    def __init__(self, records: list[PromptRecord], batch_size: int, seed: int) -> None:
        if len(records) < batch_size:
            raise ValueError(
                f"trainer.train_batch_size={batch_size} but the dataset has only {len(records)} training prompts"
            )
        self.records = records
        self.batch_size = batch_size
        self.seed = seed
        self.epoch = 0
        self.offset = 0
        self._order = self._permutation(0)

    def _permutation(self, epoch: int) -> list[int]:
        import torch

        generator = torch.Generator().manual_seed(self.seed * 1_000_003 + epoch)
        return torch.randperm(len(self.records), generator=generator).tolist()

    def next_batch(self) -> list[PromptRecord]:
        """The next ``batch_size`` records; an epoch's tail shorter than a batch is skipped."""
        if self.offset + self.batch_size > len(self.records):
            self.epoch += 1
            self.offset = 0
            self._order = self._permutation(self.epoch)
        indices = self._order[self.offset : self.offset + self.batch_size]
        self.offset += self.batch_size
        return [self.records[i] for i in indices]

    def state(self) -> dict[str, int]:
        return {"epoch": self.epoch, "offset": self.offset}

    def load_state(self, state: dict[str, int]) -> None:
        self.epoch, self.offset = int(state["epoch"]), int(state["offset"])
        self._order = self._permutation(self.epoch)
