"""The policy loss of the clipped-policy algorithms: a registered per-token loss (the kit's
``vanilla``: PPO's clipped surrogate), weighted by rollout correction when it is on, aggregated,
plus the optional entropy bonus and KL-to-reference term (:func:`make_policy_loss_fn`); and the
step's half of rollout correction (:func:`apply_rollout_correction`)."""

from __future__ import annotations

import dataclasses
from typing import TYPE_CHECKING, Optional

import torch

from rlloom.batch import Batch, masked_mean
from rlloom.protocols import LossFn
from rlloom.types import ClipLossTerms, MiniBatchStats
from rlloom_algokit.config import PolicyLossConfig
from rlloom_algokit.lookup import get_policy_loss
from rlloom_algokit.losses import aggregate, kl_estimate, mini_batch_stats, ppo_clip_loss, rollout_is_weights

if TYPE_CHECKING:
    from rlloom.plugins.registry import Registry


def constant_length(stats: MiniBatchStats, micro_batch: Batch, scale_factor: int | None) -> MiniBatchStats:
    """``stats`` with ``max_response_len`` replaced by the constant L of ``seq-mean-token-sum-norm``:
    ``scale_factor``, else ``micro_batch.meta["max_new_tokens"]`` (set by ``StepContext.generate``)."""
    length = scale_factor or micro_batch.meta.get("max_new_tokens")
    if not length:
        raise KeyError("loss_agg_mode=seq-mean-token-sum-norm divides by a constant length: set "
                       "algorithm.loss_scale_factor, or pass batches whose meta has 'max_new_tokens'")
    return dataclasses.replace(stats, max_response_len=int(length))


def apply_rollout_correction(batch: Batch, cfg: PolicyLossConfig) -> dict[str, float]:
    """The step's half of rollout correction, once per step before the actor's update: when
    ``cfg.rollout_is`` is set, ``batch["rollout_is_weights"]`` = the ``weight`` of
    :func:`rlloom_algokit.losses.rollout_is_weights` of the batch's ``old_log_probs`` against its
    ``rollout_log_probs`` (which the loss then multiplies its per-token loss by), and the metrics,
    over the response tokens: ``rollout_corr/is_weight_mean|max|min`` of w (before truncation or
    masking) and ``rollout_corr/clipped_fraction`` (``truncate``) or ``rollout_corr/masked_fraction``
    (``mask``), the fraction of tokens whose weight the mode changed. Off: nothing, no metrics."""
    if cfg.rollout_is is None:
        return {}
    batch.require("old_log_probs", "rollout_log_probs", "response_mask")
    mask = batch["response_mask"]
    weight, w, changed = rollout_is_weights(
        batch["old_log_probs"], batch["rollout_log_probs"], mask, cfg.rollout_is, cfg.rollout_is_mode,
        cfg.rollout_is_threshold, cfg.rollout_is_threshold_lower)
    batch["rollout_is_weights"] = weight
    picked = w[mask.bool()]
    fraction = "clipped_fraction" if cfg.rollout_is_mode == "truncate" else "masked_fraction"
    if picked.numel() == 0:
        return {f"rollout_corr/{name}": 0.0 for name in ("is_weight_mean", "is_weight_max", "is_weight_min", fraction)}
    return {"rollout_corr/is_weight_mean": float(picked.mean()), "rollout_corr/is_weight_max": float(picked.max()),
            "rollout_corr/is_weight_min": float(picked.min()),
            f"rollout_corr/{fraction}": float(masked_mean(changed.to(w.dtype), mask))}


def behaviour_log_probs(batch: Batch, cfg: PolicyLossConfig) -> torch.Tensor | None:
    """The old policy's log-probs: the rollout engine's ``rollout_log_probs`` when ``cfg.bypass_mode``,
    else ``old_log_probs`` (None when the batch has none: the step's single update is its own
    behaviour forward)."""
    if cfg.bypass_mode:
        batch.require("rollout_log_probs")
        return batch["rollout_log_probs"]
    return batch.get("old_log_probs")


def vanilla_policy_loss(
    log_probs: torch.Tensor, old_log_probs: torch.Tensor, advantages: torch.Tensor, response_mask: torch.Tensor, *,
    clip_ratio_low: float, clip_ratio_high: float, clip_ratio_c: Optional[float],
) -> ClipLossTerms:
    """``policy_loss=vanilla``: PPO's clipped surrogate with dual clip (:func:`rlloom_algokit.losses.ppo_clip_loss`)."""
    return ppo_clip_loss(log_probs, old_log_probs, advantages, response_mask, clip_low=clip_ratio_low,
                         clip_high=clip_ratio_high, clip_ratio_c=clip_ratio_c)


def make_policy_loss_fn(cfg: PolicyLossConfig, registry: Registry | None = None) -> LossFn:
    """A :data:`rlloom.protocols.LossFn` for ``cfg``.

    With ``agg`` = :func:`rlloom_algokit.losses.aggregate` in mode ``cfg.loss_agg_mode`` over the
    ``response_mask``, normalised by the mini-batch ``stats``:

        loss = agg(L) − entropy_coeff · agg(entropy) + kl_loss_coef · agg(KL)

    where L = c · L_π, with L_π the policy loss registered as ``cfg.policy_loss`` (looked up in ``registry``, by
    default the process's; see :class:`rlloom.protocols.PolicyLoss`) of ``outputs["log_probs"]``
    against the micro-batch's ``old_log_probs`` and ``advantages`` — or, when the micro-batch has no
    ``old_log_probs`` (on-policy: the step takes one optimizer step, so the behaviour policy *is* the
    current one), against ``outputs["log_probs"]`` detached, which makes the ratio 1 and saves the
    separate forward pass that would compute the same numbers — and KL (only when ``use_kl_loss``) is
    :func:`rlloom_algokit.losses.kl_estimate` of ``log_probs`` against ``ref_log_probs``. The entropy term
    needs ``outputs["entropy"]`` when ``entropy_coeff`` is not 0. The rollout-correction weight c
    is the micro-batch's ``rollout_is_weights`` (set by :func:`apply_rollout_correction`) when
    ``cfg.rollout_is`` is set, else 1 (the loss is then the uncorrected one, bit for bit).

    With ``seq-mean-token-sum-norm`` the length in the denominator is the constant
    ``cfg.loss_scale_factor`` (None: ``micro_batch.meta["max_new_tokens"]``, the step's
    ``sampling.max_new_tokens``), not the padded width (:func:`constant_length`).

    Metrics are this micro-batch's own values, as 0-d tensors on the loss's device (the engine sums
    them there and reads them once per step: no host sync per micro-batch): ``pg_loss`` (agg of L by its own counts),
    ``pg_clipfrac``, ``pg_clipfrac_lower``, ``ppo_kl`` (token means), plus ``entropy`` when the
    outputs hold it and ``kl_loss`` when used (own-count aggregates), and, when the micro-batch has
    ``rollout_log_probs`` but no ``old_log_probs`` (the step's single update is its behaviour
    forward), ``training/rollout_probs_diff_mean``: the token mean of
    |exp(rollout_log_probs) − exp(log_probs)|, the rollout engine vs trainer gap. With
    ``old_log_probs`` that gap was measured before any update (:meth:`StepContext.old_log_probs`);
    a later update's log-probs also hold the policy's own drift, so the loss does not report it.
    """
    token_loss = get_policy_loss(cfg.policy_loss, registry)
    mode = cfg.loss_agg_mode
    needed = ["advantages", "response_mask"]
    if cfg.use_kl_loss:
        needed.append("ref_log_probs")
    if cfg.rollout_is is not None:
        needed.append("rollout_is_weights")

    def loss_fn(
        micro_batch: Batch, outputs: dict[str, torch.Tensor], stats: MiniBatchStats
    ) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
        micro_batch.require(*needed)
        if "log_probs" not in outputs:
            raise KeyError(f"loss_fn needs outputs['log_probs']; got outputs {sorted(outputs)}")
        log_probs = outputs["log_probs"]
        entropy = outputs.get("entropy")
        if entropy is None and cfg.entropy_coeff != 0:
            raise KeyError(
                f"entropy_coeff={cfg.entropy_coeff} needs outputs['entropy'] (compute entropy in the "
                f"train engine); got outputs {sorted(outputs)}"
            )
        mask = micro_batch["response_mask"]
        own = mini_batch_stats(mask)
        if mode == "seq-mean-token-sum-norm":
            stats, own = (constant_length(counts, micro_batch, cfg.loss_scale_factor) for counts in (stats, own))
        old_log_probs = behaviour_log_probs(micro_batch, cfg)
        terms = token_loss(log_probs, log_probs.detach() if old_log_probs is None else old_log_probs,
                           micro_batch["advantages"], mask, clip_ratio_low=cfg.clip_ratio_low,
                           clip_ratio_high=cfg.clip_ratio_high, clip_ratio_c=cfg.clip_ratio_c)
        policy = terms.loss if cfg.rollout_is is None else terms.loss * micro_batch["rollout_is_weights"]
        loss = aggregate(policy, mask, mode, stats)
        with torch.no_grad():
            metrics = {
                "pg_loss": aggregate(policy, mask, mode, own),
                "pg_clipfrac": masked_mean(terms.clipped, mask),
                "pg_clipfrac_lower": masked_mean(terms.dual_clipped, mask),
                "ppo_kl": masked_mean(terms.ppo_kl, mask),
            }
            if old_log_probs is None and "rollout_log_probs" in micro_batch:
                gap = (micro_batch["rollout_log_probs"].exp() - log_probs.exp()).abs()
                metrics["training/rollout_probs_diff_mean"] = masked_mean(gap, mask)
        if entropy is not None:
            if cfg.entropy_coeff != 0:
                loss = loss - cfg.entropy_coeff * aggregate(entropy, mask, mode, stats)
            with torch.no_grad():
                metrics["entropy"] = aggregate(entropy, mask, mode, own)
        if cfg.use_kl_loss:
            kl = kl_estimate(log_probs, micro_batch["ref_log_probs"], cfg.kl_loss_type)
            loss = loss + cfg.kl_loss_coef * aggregate(kl, mask, mode, stats)
            with torch.no_grad():
                metrics["kl_loss"] = aggregate(kl, mask, mode, own)
        return loss, metrics

    if cfg.skip_zero_advantage_rows and not cfg.use_kl_loss and cfg.entropy_coeff == 0:
        return ZeroAdvantageRowsInert(loss_fn)
    return loss_fn


@dataclasses.dataclass(frozen=True)
class ZeroAdvantageRowsInert:
    """``loss_fn`` (a policy loss with no KL or entropy term) with the
    :class:`~rlloom.protocols.NamesInertRows` ability: a row whose advantages are 0 on every response
    token has loss 0 and zero gradient (the policy loss is 0 where A = 0, see
    :class:`~rlloom.protocols.PolicyLoss`)."""

    loss_fn: LossFn

    def __call__(self, micro_batch: Batch, outputs: dict[str, torch.Tensor],
                 stats: MiniBatchStats) -> tuple[torch.Tensor, dict[str, float]]:
        return self.loss_fn(micro_batch, outputs, stats)

    def inert_rows(self, batch: Batch) -> torch.Tensor:
        """Bool [B]: no response token of the row has a non-zero advantage."""
        batch.require("advantages", "response_mask")
        return ~((batch["advantages"] != 0) & batch["response_mask"].bool()).any(dim=1)
