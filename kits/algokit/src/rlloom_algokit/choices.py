"""The valid values of the algorithm config keys the loss functions read (``loss_agg_mode``,
``kl_loss_type``, ``kl_penalty``, ``rollout_is``, ``rollout_is_mode``); torch-free, so an
algorithm's config schema checks them without loading torch. :mod:`rlloom_algokit.losses` computes
with them."""

from __future__ import annotations

AGG_MODES: tuple[str, ...] = (
    "token-mean",
    "seq-mean-token-sum",
    "seq-mean-token-mean",
    "seq-mean-token-sum-norm",
)
"""The loss aggregation modes understood by :func:`rlloom_algokit.losses.aggregate`."""

KL_ESTIMATORS: dict[str, str] = {
    "k1": "k1",
    "kl": "k1",
    "abs": "abs",
    "k2": "k2",
    "mse": "k2",
    "k3": "k3",
    "low_var_kl": "k3",
}
"""Accepted names of :func:`rlloom_algokit.losses.kl_estimate` estimators -> the canonical estimator they denote."""

ROLLOUT_IS_LEVELS: tuple[str, ...] = ("token", "sequence", "geometric")
"""The levels of the rollout-correction importance weight (``algorithm.rollout_is``), see
:func:`rlloom_algokit.losses.rollout_is_weights`."""

ROLLOUT_IS_MODES: tuple[str, ...] = ("truncate", "mask")
"""What rollout correction does with a weight beyond its thresholds (``algorithm.rollout_is_mode``):
``truncate`` clips it at the upper one (TIS), ``mask`` zeroes it outside [lower, upper] (masked IS, IcePop)."""
