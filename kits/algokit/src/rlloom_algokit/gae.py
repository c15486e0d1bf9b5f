"""Generalized advantage estimation over token-level rewards and critic values."""

from __future__ import annotations

import torch

from rlloom_algokit.losses import masked_whiten


def gae_advantages(
    token_level_rewards: torch.Tensor,
    values: torch.Tensor,
    response_mask: torch.Tensor,
    gamma: float = 1.0,
    lam: float = 1.0,
    whiten: bool = True,
) -> tuple[torch.Tensor, torch.Tensor]:
    """``(advantages, returns)``, both [B, R] float32 and 0 where ``response_mask`` is 0.

    Backwards over t = R−1 … 0, vectorised over the batch, starting from V_R = 0 and A_R = 0 (the
    episode ends with the response):

        δ_t = r_t + γ·V_next − V_t,    A_t = δ_t + γλ·A_next,

    where, at a position with mask 1, V_next and A_next become V_t and A_t for the step before;
    a masked-out position passes V_next and A_next through unchanged (padding, or any hole in the
    mask, is skipped as if it were not there). Then

        returns = A + V            (before whitening: the critic's targets),
        advantages = whiten(A)     (:func:`rlloom_algokit.losses.masked_whiten`: zero mean, unit variance
                                    over the masked tokens of the whole batch).

    With fewer than two masked tokens in the batch there is no variance to whiten by, and the
    advantages are returned unwhitened; ``whiten=False`` returns A as it is (e.g. when advantages of
    different objectives are combined and must keep their units). An empty response gets 0
    advantages and returns.
    """
    shapes = {tuple(t.shape) for t in (token_level_rewards, values, response_mask)}
    if len(shapes) != 1 or token_level_rewards.dim() != 2:
        raise ValueError(
            "token_level_rewards, values and response_mask must have the same shape [B, R], got "
            f"{tuple(token_level_rewards.shape)}, {tuple(values.shape)}, {tuple(response_mask.shape)}"
        )
    rewards, values = token_level_rewards.float(), values.float()
    present = response_mask.bool()
    next_value = torch.zeros(rewards.shape[0], dtype=torch.float32, device=rewards.device)
    next_advantage = torch.zeros_like(next_value)
    advantages = torch.zeros_like(rewards)
    for t in reversed(range(rewards.shape[1])):
        delta = rewards[:, t] + gamma * next_value - values[:, t]
        advantage = delta + gamma * lam * next_advantage
        live = present[:, t]
        advantages[:, t] = torch.where(live, advantage, torch.zeros_like(advantage))
        next_value = torch.where(live, values[:, t], next_value)
        next_advantage = torch.where(live, advantage, next_advantage)
    returns = torch.where(present, advantages + values, torch.zeros_like(values))
    if whiten and int(present.sum()) >= 2:
        advantages = masked_whiten(advantages, present)
    return advantages, returns
