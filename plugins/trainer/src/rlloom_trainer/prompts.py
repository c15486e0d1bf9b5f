"""Prompts into token batches (:class:`PromptEncoder`) and the training prompts' order, epoch by epoch
(:class:`PromptIterator`, whose state a checkpoint keeps)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from rlloom.config import ConfigError
from rlloom.data import PromptRecord

if TYPE_CHECKING:
    from rlloom.batch import Batch


def check_context(model_path: str, max_new_tokens: int) -> None:
    """ConfigError unless ``sampling.max_new_tokens`` < the model's context C (``max_position_embeddings`` of
    its ``config.json``, of the text model for a multimodal one; not checked when it has none): a prompt
    needs at least one of the C positions. Reads the config only, no weights."""
    from transformers import AutoConfig

    context = getattr(AutoConfig.from_pretrained(model_path).get_text_config(), "max_position_embeddings", None)
    if context is not None and max_new_tokens >= context:
        raise ConfigError(f"sampling.max_new_tokens={max_new_tokens}: the model's context is {context} tokens "
                          f"(max_position_embeddings in {model_path}/config.json), prompt and response together; "
                          f"set sampling.max_new_tokens below {context}")


class PromptEncoder:
    """Turns :class:`PromptRecord`s into a left-padded prompt :class:`Batch`.

    Chat prompts are rendered with the tokenizer's own chat template (generation prompt added);
    string prompts are tokenized as they are. Records whose prompt has more than
    ``max_prompt_length`` tokens are dropped by :meth:`filter` (counted by the caller).

    Output fields: ``prompts`` [B, P] int64 (left-padded with the pad id), ``prompt_mask`` [B, P],
    objects ``prompt_text``, ``prompt_messages`` (the record's prompt, for agent loops, which render it
    with their tools), ``ground_truth``, ``data_source``, ``extra``.
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
                "prompt_messages": [record.prompt for record in records],
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
