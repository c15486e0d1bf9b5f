"""ReMax's advantage: the reward-to-go minus the score of the prompt's greedy response."""

from __future__ import annotations

from typing import Any, Optional

import torch

from rlloom.algos.advantages import need
from rlloom.losses import discounted_returns


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
