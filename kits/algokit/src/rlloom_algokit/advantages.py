"""Advantage estimation: the group-relative advantage several algorithms build on, this kit's
registered estimator ``grpo``, and :func:`compute_advantages`, the one call for every registered
estimator (:class:`rlloom.protocols.AdvantageEstimator`)."""

from __future__ import annotations

from collections.abc import Hashable, Sequence
from typing import TYPE_CHECKING, Any, Optional

import torch

from rlloom.protocols import AdvantageEstimator
from rlloom_algokit.lookup import get_advantage_estimator

if TYPE_CHECKING:
    from rlloom.plugins.registry import Registry


def group_index(group_ids: Sequence[Hashable]) -> tuple[list[int], list[int]]:
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
    rows, firsts = group_index(group_ids)
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


def need(estimator: str, **inputs: Any) -> None:
    """Raise ``ValueError`` naming the first of ``inputs`` that is None: what ``estimator`` needs
    from the batch and did not get (an estimator chosen for a batch that lacks its inputs)."""
    for name, value in inputs.items():
        if value is None:
            raise ValueError(f"advantage estimator {estimator!r} needs {name}, and the batch has none")


def grpo_estimator(*, scores: Optional[torch.Tensor], group_ids: Optional[Sequence[Hashable]],
                   response_mask: torch.Tensor, norm_by_std: bool, eps: float, **_: Any) -> torch.Tensor:
    """``adv_estimator=grpo``: :func:`group_relative_advantages` of the sequence ``scores``."""
    need("grpo", scores=scores, group_ids=group_ids)
    return group_relative_advantages(scores, group_ids, response_mask, norm_by_std=norm_by_std, eps=eps)


def compute_advantages(
    estimator: str | AdvantageEstimator,
    *,
    response_mask: torch.Tensor,
    scores: Optional[torch.Tensor] = None,
    token_level_rewards: Optional[torch.Tensor] = None,
    group_ids: Optional[Sequence[Hashable]] = None,
    baselines: Optional[torch.Tensor] = None,
    gamma: float = 1.0,
    norm_by_std: bool = True,
    eps: float = 1e-6,
    registry: Registry | None = None,
) -> torch.Tensor:
    """Advantages [N, R] from ``estimator``: a registered name (looked up in ``registry``, by
    default the process's, see :func:`rlloom_algokit.lookup.get_advantage_estimator`) or the function
    itself, called with every input of :class:`rlloom.protocols.AdvantageEstimator` (the
    defaults here for those not given)."""
    fn = get_advantage_estimator(estimator, registry) if isinstance(estimator, str) else estimator
    return fn(scores=scores, token_level_rewards=token_level_rewards, response_mask=response_mask,
              group_ids=group_ids, baselines=baselines, gamma=gamma, norm_by_std=norm_by_std, eps=eps)
