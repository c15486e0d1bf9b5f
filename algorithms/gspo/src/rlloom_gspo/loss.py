"""GSPO's policy loss: PPO's clipped surrogate with the ratio taken per sequence."""

from __future__ import annotations

from typing import Optional

import torch

from rlloom.losses import ClipLossTerms, ppo_clip_loss, sequence_log_ratio


def gspo_policy_loss(
    log_probs: torch.Tensor, old_log_probs: torch.Tensor, advantages: torch.Tensor, mask: torch.Tensor, *,
    clip_ratio_low: float, clip_ratio_high: float, clip_ratio_c: Optional[float],
) -> ClipLossTerms:
    """``policy_loss=gspo``: :func:`rlloom.losses.ppo_clip_loss` with the token ratio replaced by the
    sequence ratio s_i = exp(mean_t(log π − log π_old)) (:func:`rlloom.losses.sequence_log_ratio`):

        L_it = max(−A_it·s_it, −A_it·clip(s_it, 1 − clip_ratio_low, 1 + clip_ratio_high)),
        s_it = s_i in value, ∇ s_it = s_i·∇ log π_it,

    aggregated by the config's ``loss_agg_mode`` (``GSPOConfig``: seq-mean-token-mean, so the
    gradient of a row is that of −A_i·s_i). It is done by handing the PPO loss the behaviour
    log-probs sg[log π − log s_it], so that its log π − log π_old is exactly log s_it; ``ppo_kl`` is
    then the token mean of −log s_i. With ``old_log_probs`` = sg[log π] (a single on-policy update)
    s_i = 1. The entropy and KL terms of :func:`rlloom.algos.policy_loss.make_policy_loss_fn` use the
    unmodified log-probs.
    """
    log_ratio = sequence_log_ratio(log_probs, old_log_probs, mask)
    return ppo_clip_loss(log_probs, (log_probs - log_ratio).detach(), advantages, mask, clip_low=clip_ratio_low,
                         clip_high=clip_ratio_high, clip_ratio_c=clip_ratio_c)
