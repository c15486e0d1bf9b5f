"""The GRPO family's policy losses (``algorithm.policy_loss``): CISPO's clipped importance-sampling
weight (MiniMax-M1, arXiv 2506.13585) and GSPO's sequence-level ratio. PPO's clipped surrogate
(``vanilla``) is the algorithm kit's (:func:`rlloom_algokit.losses.ppo_clip_loss`)."""

from __future__ import annotations

from typing import Optional

import torch

from rlloom.types import ClipLossTerms
from rlloom_algokit.losses import LOG_RATIO_CLAMP, ppo_clip_loss, sequence_log_ratio


def cispo_token_loss(
    log_probs: torch.Tensor, old_log_probs: torch.Tensor, advantages: torch.Tensor, mask: torch.Tensor, *,
    clip_ratio_low: float, clip_ratio_high: float, clip_ratio_c: Optional[float],
) -> ClipLossTerms:
    """``policy_loss=cispo``, per token (all [B, R], 0 on padding):

        ρ_t = exp(clamp(log π_t − log π_old,t, ±20)),   w_t = sg[clip(ρ_t, 1 − low, 1 + high)],
        L_t = −w_t · A_t · log π_t

    so ∇L_t = −w_t · A_t · ∇log π_t: a token whose ratio left the range still has a gradient,
    scaled by the bound (PPO's clipped surrogate gives it none). ``clipped`` marks tokens with
    w_t ≠ ρ_t (``pg_clipfrac``), ``dual_clipped`` is 0, ``ppo_kl`` = log π_old − log π.
    With ``old_log_probs`` = sg[log π] (one on-policy update) w = 1 and L = −A · log π.
    ``clip_ratio_c`` (dual clip, a bound on PPO's surrogate) does not apply.
    """
    log_ratio = torch.clamp(log_probs - old_log_probs, -LOG_RATIO_CLAMP, LOG_RATIO_CLAMP)
    ratio = torch.exp(log_ratio).detach()
    weight = torch.clamp(ratio, 1.0 - clip_ratio_low, 1.0 + clip_ratio_high)
    present = mask.bool()
    zero = torch.zeros_like(log_probs)
    return ClipLossTerms(
        loss=torch.where(present, -weight * advantages * log_probs, zero),
        clipped=((weight != ratio) & present).to(log_probs.dtype),
        dual_clipped=zero.detach(),
        ppo_kl=torch.where(present, -log_ratio, zero).detach(),
    )


def gspo_policy_loss(
    log_probs: torch.Tensor, old_log_probs: torch.Tensor, advantages: torch.Tensor, mask: torch.Tensor, *,
    clip_ratio_low: float, clip_ratio_high: float, clip_ratio_c: Optional[float],
) -> ClipLossTerms:
    """``policy_loss=gspo``: :func:`rlloom_algokit.losses.ppo_clip_loss` with the token ratio replaced by the
    sequence ratio s_i = exp(mean_t(log π − log π_old)) (:func:`rlloom_algokit.losses.sequence_log_ratio`):

        L_it = max(−A_it·s_it, −A_it·clip(s_it, 1 − clip_ratio_low, 1 + clip_ratio_high)),
        s_it = s_i in value, ∇ s_it = s_i·∇ log π_it,

    aggregated by the config's ``loss_agg_mode`` (``GSPOConfig``: seq-mean-token-mean, so the
    gradient of a row is that of −A_i·s_i). It is done by handing the PPO loss the behaviour
    log-probs sg[log π − log s_it], so that its log π − log π_old is exactly log s_it; ``ppo_kl`` is
    then the token mean of −log s_i. With ``old_log_probs`` = sg[log π] (a single on-policy update)
    s_i = 1. The entropy and KL terms of :func:`rlloom_algokit.policy_loss.make_policy_loss_fn` use the
    unmodified log-probs.
    """
    log_ratio = sequence_log_ratio(log_probs, old_log_probs, mask)
    return ppo_clip_loss(log_probs, (log_probs - log_ratio).detach(), advantages, mask, clip_low=clip_ratio_low,
                         clip_high=clip_ratio_high, clip_ratio_c=clip_ratio_c)
