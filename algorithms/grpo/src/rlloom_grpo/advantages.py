"""GRPO's outcome advantage: each score compared with the other samples drawn for the same prompt."""

from __future__ import annotations

from collections.abc import Hashable, Sequence

import torch


def _group_index(group_ids: Sequence[Hashable]) -> tuple[list[int], list[int]]:
    """Map hashable ids to 0..G-1 in order of first appearance; also return each group's first row."""
    index: dict[Hashable, int] = {}
    firsts: list[int] = []
    rows = []
    for row, group in enumerate(group_ids):
        if group not in index:
            index[group] = len(firsts)
            firsts.append(row)
        rows.append(index[group])
    return rows, firsts


def group_relative_advantages(
    scores: torch.Tensor,
    group_ids: Sequence[Hashable],
    response_mask: torch.Tensor,
    norm_by_std: bool = True,
    eps: float = 1e-6,
) -> torch.Tensor:
    """Per-token advantages [N, R] (float32) from sequence scores ``scores`` [N].

    Samples with equal ``group_ids`` form a group G (any order; groups need not be contiguous):

    - GRPO (``norm_by_std``):      A_i = (r_i − mean_G) / (std_G + eps), std_G unbiased (ddof 1);
    - Dr.GRPO (not ``norm_by_std``): A_i = r_i − mean_G;

    a group of one sample has no peers to compare with and, as in verl, uses mean 0 and std 1:
    A = r / (1 + eps) (GRPO) or A = r (Dr.GRPO), so ``n = 1`` still learns from its raw reward.
    A_i is broadcast over the response: A_it = A_i · m_it. Computed in float64; the mean is taken
    relative to the group's first score, so a group of two or more equal scores gets exactly 0.
    """
    if scores.dim() != 1:
        raise ValueError(f"scores must be 1-D [N], got shape {tuple(scores.shape)}")
    num = scores.shape[0]
    if len(group_ids) != num:
        raise ValueError(f"group_ids has {len(group_ids)} entries, scores has {num}")
    if response_mask.dim() != 2 or response_mask.shape[0] != num:
        raise ValueError(f"response_mask must be [N={num}, R], got shape {tuple(response_mask.shape)}")
    if norm_by_std and not eps > 0:
        raise ValueError(f"eps must be > 0 when norm_by_std (equal scores have std 0), got {eps}")
    rows, firsts = _group_index(group_ids)
    group = torch.tensor(rows, dtype=torch.long, device=scores.device)
    first = torch.tensor(firsts, dtype=torch.long, device=scores.device)
    num_groups = len(firsts)
    r = scores.detach().to(torch.float64)

    def group_sum(values: torch.Tensor) -> torch.Tensor:
        return torch.zeros(num_groups, dtype=values.dtype, device=values.device).index_add_(0, group, values)

    count = group_sum(torch.ones_like(r))
    shift = r[first][group]
    mean = torch.where(count > 1, r[first] + group_sum(r - shift) / count, torch.zeros_like(count))
    deviation = r - mean[group]
    if norm_by_std:
        unbiased_var = group_sum(deviation.square()) / (count - 1).clamp(min=1)
        std = torch.where(count > 1, unbiased_var.sqrt(), torch.ones_like(count))
        deviation = deviation / (std[group] + eps)
    advantages = deviation.to(torch.float32)
    return advantages[:, None] * response_mask.to(torch.float32)


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
    rows, firsts = _group_index(group_ids)
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
