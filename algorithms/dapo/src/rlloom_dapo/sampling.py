"""DAPO's dynamic sampling: keep only groups whose filter metric differs."""

from __future__ import annotations

from collections.abc import Hashable, Sequence

import torch

from rlloom.batch import Batch
from rlloom.controller.step import REWARD_ROLE

def filter_values(batch: Batch, metric: str, unshaped_scores: torch.Tensor) -> torch.Tensor:
    """Per-row values [B] the group filter compares: for ``acc`` the reward's ``correct`` component
    (``reward_correct``) when it reports one, else ``unshaped_scores`` (the scores before overlong
    shaping); for ``score`` the shaped ``scores`` the advantages use."""
    if metric == "score":
        return batch["scores"]
    return batch.get(f"{REWARD_ROLE}_correct", unshaped_scores)


def varied_groups(values: torch.Tensor, group_ids: Sequence[Hashable]) -> tuple[list[list[int]], int]:
    """Split rows into groups of equal ``group_ids`` (in order of first appearance) and keep the
    groups whose ``values`` are not all equal (max > min), and groups of one sample (nothing to
    compare them with; verl keeps them too: their advantage is their raw reward).

    Returns the kept groups' row indices and the number of dropped groups."""
    if values.dim() != 1 or len(group_ids) != values.shape[0]:
        raise ValueError(f"need values [N] and N group_ids, got {tuple(values.shape)} and {len(group_ids)}")
    groups: dict[Hashable, list[int]] = {}
    for row, group in enumerate(group_ids):
        groups.setdefault(group, []).append(row)
    kept = [rows for rows in groups.values() if len(rows) == 1 or values[rows].max() > values[rows].min()]
    return kept, len(groups) - len(kept)
