"""Prompt records (what a :class:`~rlloom.protocols.PromptDataset` holds), their train/val container
:class:`Splits` and the seeded split the in-tree datasets share. Torch-free."""

from __future__ import annotations

import random
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, TypeVar


@dataclass(frozen=True)
class PromptRecord:
    """One prompt with what is needed to score answers to it: ``prompt``, chat messages
    (``[{"role": "user", "content": ...}]``, rendered with the chat template) or a plain string (tokenized as
    is); ``ground_truth``, what the reward compares against; ``data_source``, the task name (metrics are
    per source); ``extra``, anything else a verifier needs (a reasoning-gym entry)."""

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
    """``(train, val)``: ``items`` shuffled by ``random.Random(seed).shuffle``, the first ``num_val`` val,
    the next ``num_train`` train (0: all the rest). ValueError naming the dataset ``name`` when a size is
    negative, ``num_val + num_train`` exceeds ``len(items)`` or no training item is left."""
    if num_val < 0 or num_train < 0:
        raise ValueError(f"data={name}: num_val={num_val} and num_train={num_train} must be >= 0")
    if num_val + num_train > len(items):
        raise ValueError(f"data={name}: num_val + num_train = {num_val} + {num_train} = {num_val + num_train} exceeds "
                         f"the {len(items)} distinct problems of this config")
    if num_train == 0 and num_val >= len(items):
        raise ValueError(f"data={name}: num_val={num_val} leaves none of the {len(items)} problems for training")
    order = list(items)
    random.Random(seed).shuffle(order)
    val = order[:num_val]
    train = order[num_val : num_val + num_train] if num_train else order[num_val:]
    return train, val
