"""GSPO's policy loss: GRPO's loss with the ratio taken per sequence."""

from __future__ import annotations

import torch

from rlloom.batch import Batch
from rlloom.losses import sequence_log_ratio
from rlloom.protocols import LossFn
from rlloom.types import MiniBatchStats
from rlloom_gspo.config import GSPOConfig
from rlloom_grpo.loss import make_policy_loss_fn


def make_gspo_loss_fn(cfg: GSPOConfig) -> LossFn:
    """:func:`rlloom_grpo.loss.make_policy_loss_fn` of ``cfg`` with the token ratio replaced by the
    sequence ratio s_i = exp(mean_t(log π − log π_old)) (:func:`rlloom.losses.sequence_log_ratio`):

        L_it = max(−A_it·s_it, −A_it·clip(s_it, 1 − clip_ratio_low, 1 + clip_ratio_high)),
        s_it = s_i in value, ∇ s_it = s_i·∇ log π_it,

    aggregated by ``cfg.loss_agg_mode`` (seq-mean-token-mean by default: the gradient of a row
    is then that of −A_i·s_i). It is done by handing the PPO loss the behaviour log-probs
    sg[log π − log s_it], so that its log π − log π_old is exactly log s_it; ``ppo_kl`` is then the
    token mean of −log s_i. Without ``old_log_probs`` (single on-policy update) π_old = sg[π] and
    s_i = 1. Entropy and KL terms use the unmodified log-probs.
    """
    policy_loss = make_policy_loss_fn(cfg)

    def loss_fn(
        micro_batch: Batch, outputs: dict[str, torch.Tensor], stats: MiniBatchStats
    ) -> tuple[torch.Tensor, dict[str, float]]:
        micro_batch.require("response_mask")
        if "log_probs" not in outputs:
            raise KeyError(f"loss_fn needs outputs['log_probs']; got outputs {sorted(outputs)}")
        log_probs = outputs["log_probs"]
        old_log_probs = micro_batch.get("old_log_probs")
        if old_log_probs is None:
            old_log_probs = log_probs.detach()
        log_ratio = sequence_log_ratio(log_probs, old_log_probs, micro_batch["response_mask"])
        shifted = micro_batch.exclude("old_log_probs")
        shifted["old_log_probs"] = (log_probs - log_ratio).detach()
        return policy_loss(shifted, outputs, stats)

    return loss_fn
