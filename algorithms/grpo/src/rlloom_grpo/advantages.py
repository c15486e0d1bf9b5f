"""The GRPO family's advantage estimators (registered under the names given with each): GRPO's
pass@k, RLOO's leave-one-out, ReMax's greedy baseline, REINFORCE++'s whitened returns. The
group-relative advantage itself is the algorithm kit's
(:func:`rlloom_algokit.advantages.group_relative_advantages`)."""

from __future__ import annotations

from collections import Counter
from collections.abc import Hashable, Sequence
from typing import Any, Optional

import torch
from rlloom_algokit.advantages import group_index, group_relative_advantages, need
from rlloom_algokit.losses import discounted_returns, masked_whiten


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


def remax_advantages(rewards: torch.Tensor, baselines: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """A_t = (Σ_{t'≥t} r_t') − b per response token (0 on padding), with ``rewards`` [N, R] the
    token-level rewards and ``baselines`` [N] the score b of the greedy rollout of each row's prompt."""
    if baselines.shape != rewards.shape[:1]:
        raise ValueError(f"baselines must be [N={rewards.shape[0]}], got shape {tuple(baselines.shape)}")
    to_go = discounted_returns(rewards, mask, gamma=1.0)
    return (to_go - baselines.to(to_go.dtype)[:, None]) * mask.to(to_go.dtype)


def remax_estimator(*, token_level_rewards: Optional[torch.Tensor], baselines: Optional[torch.Tensor],
                    response_mask: torch.Tensor, **_: Any) -> torch.Tensor:
    """``adv_estimator=remax``: :func:`remax_advantages` of the ``token_level_rewards`` against the
    ``baselines`` (the batch's ``reward_baselines``)."""
    need("remax", token_level_rewards=token_level_rewards, baselines=baselines)
    return remax_advantages(token_level_rewards, baselines, response_mask)


def reinforce_pp_advantages(rewards: torch.Tensor, mask: torch.Tensor, gamma: float = 1.0) -> torch.Tensor:
    """REINFORCE++: G_t = r_t + γ·G_{t+1} over each response's token rewards ``rewards`` [N, R]
    (:func:`rlloom_algokit.losses.discounted_returns`), then whitened over all response tokens of the batch
    (:func:`rlloom_algokit.losses.masked_whiten`; 0 on padding)."""
    return masked_whiten(discounted_returns(rewards, mask, gamma), mask)


def reinforce_pp_baseline_advantages(
    rewards: torch.Tensor, group_ids: Sequence[Hashable], mask: torch.Tensor
) -> torch.Tensor:
    """REINFORCE++-baseline: a_i = r_i − mean_G with r_i = Σ_t rewards_it (a group of one keeps r_i, as verl),
    broadcast over the response, then whitened over all response tokens of the batch."""
    centered = group_relative_advantages(rewards.sum(dim=1), group_ids, mask, norm_by_std=False)
    return masked_whiten(centered, mask)


def reinforce_pp_estimator(*, token_level_rewards: Optional[torch.Tensor], response_mask: torch.Tensor,
                           gamma: float, **_: Any) -> torch.Tensor:
    """``adv_estimator=reinforce_pp``: :func:`reinforce_pp_advantages` of the ``token_level_rewards``."""
    need("reinforce_pp", token_level_rewards=token_level_rewards)
    return reinforce_pp_advantages(token_level_rewards, response_mask, gamma)


def reinforce_pp_baseline_estimator(*, token_level_rewards: Optional[torch.Tensor],
                                    group_ids: Optional[Sequence[Hashable]], response_mask: torch.Tensor,
                                    **_: Any) -> torch.Tensor:
    """``adv_estimator=reinforce_pp_baseline``: :func:`reinforce_pp_baseline_advantages` of the
    ``token_level_rewards``."""
    need("reinforce_pp_baseline", token_level_rewards=token_level_rewards, group_ids=group_ids)
    return reinforce_pp_baseline_advantages(token_level_rewards, group_ids, response_mask)
