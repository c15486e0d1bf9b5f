"""The critic's clipped value loss and the explained-variance diagnostic."""

from __future__ import annotations

from typing import NamedTuple

import torch

from rlloom.batch import Batch, masked_mean
from rlloom.protocols import LossFn
from rlloom.types import MiniBatchStats
from rlloom_algokit.losses import aggregate, mini_batch_stats
from rlloom_algokit.policy_loss import constant_length


class ValueLossTerms(NamedTuple):
    """Per-token outputs of :func:`clipped_value_loss`, [B, R], 0 where the mask is 0."""

    loss: torch.Tensor
    """½·max((v − R)², (v_clip − R)²)."""
    clipped: torch.Tensor
    """1.0 where the clipped term is the larger one: averaged, ``vf_clipfrac``."""


def clipped_value_loss(
    values: torch.Tensor, old_values: torch.Tensor, returns: torch.Tensor, mask: torch.Tensor, cliprange: float
) -> ValueLossTerms:
    """PPO's value loss per token: v_clip = v_old + clip(v − v_old, −ε, ε) with ε = ``cliprange``,
    L = ½·max((v − R)², (v_clip − R)²). Gradients flow into ``values`` only; masked positions
    contribute nothing (not even a NaN gradient)."""
    if not values.shape == old_values.shape == returns.shape == mask.shape:
        raise ValueError(
            f"values, old_values, returns and mask must have the same shape, got {tuple(values.shape)}, "
            f"{tuple(old_values.shape)}, {tuple(returns.shape)}, {tuple(mask.shape)}"
        )
    present = mask.bool()
    # Padding is replaced by 0 before any arithmetic, so NaN/inf there cannot reach the gradient.
    values, old_values, returns = (torch.where(present, x, torch.zeros_like(x)) for x in (values, old_values, returns))
    clipped_values = old_values + torch.clamp(values - old_values, -cliprange, cliprange)
    unclipped_loss = (values - returns).square()
    clipped_loss = (clipped_values - returns).square()
    loss = 0.5 * torch.maximum(unclipped_loss, clipped_loss)
    return ValueLossTerms(
        loss=torch.where(present, loss, torch.zeros_like(loss)),
        clipped=((clipped_loss > unclipped_loss) & present).to(loss.dtype),
    )


def explained_variance(returns: torch.Tensor, values: torch.Tensor, mask: torch.Tensor) -> float:
    """1 − Var(R − v) / Var(R), variances over the masked tokens (same normalisation in both, so
    the ratio does not depend on it). 1: perfect prediction; 0: no better than the mean; negative:
    worse. NaN when Var(R) is 0 (nothing to explain) or the mask is empty."""
    present = mask.bool()
    if not present.any():
        return float("nan")

    def variance(x: torch.Tensor) -> torch.Tensor:
        return masked_mean((x - masked_mean(x, present)).square(), present)

    target_variance = variance(returns.float())
    if target_variance == 0:
        return float("nan")
    return float(1.0 - variance(returns.float() - values.float()) / target_variance)


def make_value_loss_fn(cliprange_value: float, loss_agg_mode: str, values_key: str = "values",
                       returns_key: str = "returns", loss_scale_factor: int | None = None) -> LossFn:
    """A :data:`rlloom.protocols.LossFn` for the critic: ``agg(L_V)`` (:func:`clipped_value_loss`
    of ``outputs["values"]`` against the micro-batch's rollout values ``values_key`` and its
    ``returns_key``; e.g. ``cost_values``/``cost_returns`` for a cost critic), aggregated in
    ``loss_agg_mode`` over the ``response_mask`` with the mini-batch ``stats``. With
    ``seq-mean-token-sum-norm`` the length in the denominator is the constant ``loss_scale_factor``
    (None: ``micro_batch.meta["max_new_tokens"]``), not the padded width, as in the policy loss
    (:func:`rlloom_algokit.policy_loss.constant_length`).

    Metrics (this micro-batch's own counts, 0-d tensors): ``vf_loss``, ``vf_clipfrac`` (token mean) and
    ``vpred_mean`` (token mean of the current values).
    """

    def loss_fn(
        micro_batch: Batch, outputs: dict[str, torch.Tensor], stats: MiniBatchStats
    ) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
        micro_batch.require(values_key, returns_key, "response_mask")
        if "values" not in outputs:
            raise KeyError(f"the value loss needs outputs['values'] (a critic engine); got outputs {sorted(outputs)}")
        mask = micro_batch["response_mask"]
        own = mini_batch_stats(mask)
        if loss_agg_mode == "seq-mean-token-sum-norm":
            stats, own = (constant_length(counts, micro_batch, loss_scale_factor) for counts in (stats, own))
        terms = clipped_value_loss(
            outputs["values"], micro_batch[values_key], micro_batch[returns_key], mask, cliprange_value
        )
        with torch.no_grad():
            metrics = {
                "vf_loss": aggregate(terms.loss, mask, loss_agg_mode, own),
                "vf_clipfrac": masked_mean(terms.clipped, mask),
                "vpred_mean": masked_mean(outputs["values"], mask),
            }
        return aggregate(terms.loss, mask, loss_agg_mode, stats), metrics

    return loss_fn
