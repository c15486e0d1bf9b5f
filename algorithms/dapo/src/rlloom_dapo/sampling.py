"""DAPO's dynamic sampling: keep only groups whose scores differ, and join rounds into one batch."""

from __future__ import annotations

from collections.abc import Hashable, Sequence

import torch
import torch.nn.functional as F

from rlloom.batch import Batch

LEFT_PADDED = ("prompts", "prompt_mask")
"""[B, P] fields padded on the left (``rlloom.batch`` conventions); other [B, L] fields pad right."""


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


def concat_padded(batches: Sequence[Batch]) -> Batch:
    """:meth:`Batch.concat` of batches whose [B, L] tensors may differ in L (rounds of generation
    pad prompts and responses to their own longest): each is padded with 0 to the longest —
    :data:`LEFT_PADDED` fields on the left, the others on the right. Masks pad with 0, so the
    added positions are padding."""
    widths: dict[str, int] = {}
    for batch in batches:
        for name, value in batch.tensors.items():
            if value.dim() == 2:
                widths[name] = max(widths.get(name, 0), value.shape[1])

    def padded(batch: Batch) -> Batch:
        tensors = {}
        for name, value in batch.tensors.items():
            if value.dim() == 2:
                extra = widths[name] - value.shape[1]
                value = F.pad(value, (extra, 0) if name in LEFT_PADDED else (0, extra))
            tensors[name] = value
        return Batch(tensors, batch.objects, batch.meta, batch_size=len(batch))

    return Batch.concat([padded(batch) for batch in batches])
