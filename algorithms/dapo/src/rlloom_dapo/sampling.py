"""DAPO's dynamic sampling: keep only groups whose scores differ."""

from __future__ import annotations

from collections.abc import Hashable, Sequence

import torch


def varied_groups(scores: torch.Tensor, group_ids: Sequence[Hashable]) -> tuple[list[list[int]], int]:
    """Split rows into groups of equal ``group_ids`` (in order of first appearance) and keep the
    groups whose ``scores`` are not all equal (max > min). A group of one sample is all-equal.

    Returns the kept groups' row indices and the number of dropped groups."""
    if scores.dim() != 1 or len(group_ids) != scores.shape[0]:
        raise ValueError(f"need scores [N] and N group_ids, got {tuple(scores.shape)} and {len(group_ids)}")
    groups: dict[Hashable, list[int]] = {}
    for row, group in enumerate(group_ids):
        groups.setdefault(group, []).append(row)
    kept = [rows for rows in groups.values() if scores[rows].max() > scores[rows].min()]
    return kept, len(groups) - len(kept)
