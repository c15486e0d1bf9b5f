"""The KL penalty in the reward and the controllers of its coefficient β."""

from __future__ import annotations

import torch

from rlloom.losses import aggregate, kl_estimate


class FixedKLController:
    """β stays at its initial value."""

    def __init__(self, kl_coef: float) -> None:
        self.value = kl_coef

    def update(self, current_kl: float, n_steps: int) -> None:
        """Nothing to adapt."""


class AdaptiveKLController:
    """β adapted towards a target KL (Ziegler et al. 2019, as in verl):

        β ← β · (1 + clip(KL / target − 1, −0.2, 0.2) · n_steps / horizon)

    with KL the batch's measured KL and ``n_steps`` the samples (responses) it was measured on.
    """

    def __init__(self, kl_coef: float, target: float, horizon: int) -> None:
        if not target > 0 or horizon < 1:
            raise ValueError(f"adaptive KL control needs target > 0 and horizon >= 1, got {target}, {horizon}")
        self.value = kl_coef
        self.target = target
        self.horizon = horizon

    def update(self, current_kl: float, n_steps: int) -> None:
        error = min(max(current_kl / self.target - 1.0, -0.2), 0.2)
        self.value *= 1.0 + error * n_steps / self.horizon


def apply_kl_penalty(
    token_level_scores: torch.Tensor,
    old_log_probs: torch.Tensor,
    ref_log_probs: torch.Tensor,
    response_mask: torch.Tensor,
    kl_coef: float,
    estimator: str,
) -> tuple[torch.Tensor, float]:
    """``(token_level_rewards, kl)``: rewards r_t = s_t − β·kl_t·m_t, with kl_t the estimator
    ``estimator`` (:func:`rlloom.losses.kl_estimate`) of log π_old − log π_ref, and the batch's KL:
    the mean over non-empty responses of each response's token mean of kl_t (what an adaptive
    controller is fed)."""
    kl = kl_estimate(old_log_probs, ref_log_probs, estimator)
    kl = torch.where(response_mask.bool(), kl, torch.zeros_like(kl))
    rewards = token_level_scores - kl_coef * kl
    return rewards, float(aggregate(kl, response_mask, "seq-mean-token-mean"))
