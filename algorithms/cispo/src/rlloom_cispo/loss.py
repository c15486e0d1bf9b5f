"""CISPO's per-token policy loss (MiniMax-M1, arXiv 2506.13585): the clipped importance-sampling
weight under a stop-gradient times the advantage times the log-prob."""

from __future__ import annotations

from typing import Optional

import torch

from rlloom.losses import LOG_RATIO_CLAMP, ClipLossTerms


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
