"""GRPO's pass@k advantage (``adv_estimator=grpo_passk``): only each group's best sample learns.
The group-relative advantage itself is the core's (:func:`rlloom.algos.advantages.group_relative_advantages`)."""

from __future__ import annotations

from collections.abc import Hashable, Sequence
from typing import Any, Optional

import torch
from rlloom.algos.advantages import group_index, need


def passk_advantages(
    scores: torch.Tensor,
    group_ids: Sequence[Hashable],
    response_mask: torch.Tensor,
    norm_by_std: bool = True,
    eps: float = 1e-6,
) -> torch.Tensor:
    """GRPO pass@k advantages [N, R] (float32): in each group G only its best sample (the first
    of equal maxima) gets

        A = r_max − r_second             (r_second: the second-highest score, counting repeats)
        A = (r_max − r_second) / (std_G + eps)    with ``norm_by_std`` (std_G unbiased)

    and every other sample gets 0; so do groups of one sample and groups whose best score is tied.
    A is broadcast over the response (× ``response_mask``).
    """
    if scores.dim() != 1 or len(group_ids) != scores.shape[0] or response_mask.shape[0] != scores.shape[0]:
        raise ValueError(
            f"need scores [N], N group_ids and response_mask [N, R]; got scores {tuple(scores.shape)}, "
            f"{len(group_ids)} group_ids, response_mask {tuple(response_mask.shape)}"
        )
    if norm_by_std and not eps > 0:
        raise ValueError(f"eps must be > 0 when norm_by_std, got {eps}")
    rows, firsts = group_index(group_ids)
    groups: list[list[int]] = [[] for _ in firsts]
    for row, group in enumerate(rows):
        groups[group].append(row)
    r = scores.detach().to(torch.float64)
    advantages = torch.zeros_like(r)
    for members in groups:
        if len(members) < 2:
            continue
        values = r[members]
        top2 = torch.topk(values, 2).values
        gap = top2[0] - top2[1]
        if norm_by_std:
            gap = gap / (values.std() + eps)
        advantages[members[int(torch.argmax(values))]] = gap
    return advantages.to(torch.float32)[:, None] * response_mask.to(torch.float32)


def passk_estimator(*, scores: Optional[torch.Tensor], group_ids: Optional[Sequence[Hashable]],
                    response_mask: torch.Tensor, norm_by_std: bool, eps: float, **_: Any) -> torch.Tensor:
    """``adv_estimator=grpo_passk``: :func:`passk_advantages` of the sequence ``scores``."""
    need("grpo_passk", scores=scores, group_ids=group_ids)
    return passk_advantages(scores, group_ids, response_mask, norm_by_std=norm_by_std, eps=eps)
