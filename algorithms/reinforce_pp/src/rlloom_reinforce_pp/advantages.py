"""REINFORCE++ advantages: token-level returns (or group-centred scores) whitened over the batch."""

from __future__ import annotations

from collections.abc import Hashable, Sequence
from typing import Any, Optional

import torch

from rlloom.algos.advantages import group_relative_advantages, need
from rlloom.losses import discounted_returns, masked_whiten


def reinforce_pp_advantages(rewards: torch.Tensor, mask: torch.Tensor, gamma: float = 1.0) -> torch.Tensor:
    """REINFORCE++: G_t = r_t + γ·G_{t+1} over each response's token rewards ``rewards`` [N, R]
    (:func:`rlloom.losses.discounted_returns`), then whitened over all response tokens of the batch
    (:func:`rlloom.losses.masked_whiten`; 0 on padding)."""
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
