"""RLOO's outcome advantage: each score compared with the mean of the *other* samples of its group."""

from __future__ import annotations

from collections import Counter
from collections.abc import Hashable, Sequence
from typing import Any, Optional

import torch

from rlloom.algos.advantages import group_relative_advantages, need


def rloo_advantages(scores: torch.Tensor, group_ids: Sequence[Hashable], response_mask: torch.Tensor) -> torch.Tensor:
    """Per-token advantages [N, R] (float32) from scores [N]; groups are rows of equal ``group_ids``:

        A_i = r_i − mean_{j∈G, j≠i} r_j = n/(n−1) · (r_i − mean_G)     (n = |G| > 1)

    and A_i = r_i for a group of one (no other sample to compare with; verl's choice too),
    broadcast over the response (× ``response_mask``).
    """
    centered = group_relative_advantages(scores, group_ids, response_mask, norm_by_std=False)
    sizes = Counter(group_ids)
    scale = [sizes[g] / (sizes[g] - 1) if sizes[g] > 1 else 1.0 for g in group_ids]
    return centered * torch.tensor(scale, device=centered.device)[:, None]


def rloo_estimator(*, scores: Optional[torch.Tensor], group_ids: Optional[Sequence[Hashable]],
                   response_mask: torch.Tensor, **_: Any) -> torch.Tensor:
    """``adv_estimator=rloo``: :func:`rloo_advantages` of the sequence ``scores``."""
    need("rloo", scores=scores, group_ids=group_ids)
    return rloo_advantages(scores, group_ids, response_mask)
