"""The name → function tables of advantage estimators and policy losses, and their signatures.

Plugins fill both through hooks, as they register everything else
(:mod:`rlloom.plugins.hookspecs`)::

    @rlloom.hookimpl
    def register_advantage_estimators(register):
        register("rloo", "rlloom_rloo.advantages:rloo_estimator")

    @rlloom.hookimpl
    def register_policy_losses(register):
        register("cispo", "rlloom_cispo.loss:cispo_token_loss")

(a function, or ``"module:attribute"`` naming one, imported when first looked up). The config
keys ``algorithm.adv_estimator`` and ``algorithm.policy_loss`` are checked against these tables
when a config is composed (:func:`rlloom.config.compose.check_registered_functions`).

This module imports no torch: the signatures below name tensors for the reader only.
"""

from __future__ import annotations

from collections.abc import Hashable, Sequence
from typing import TYPE_CHECKING, Any, Optional, Protocol

if TYPE_CHECKING:
    import torch

    from rlloom.losses import ClipLossTerms
    from rlloom.plugins.registry import Registry

ADVANTAGE_ESTIMATOR = "advantage_estimator"
"""The registry kind of advantage estimators (hook ``register_advantage_estimators``)."""

POLICY_LOSS = "policy_loss"
"""The registry kind of policy losses (hook ``register_policy_losses``)."""


class AdvantageEstimator(Protocol):
    """The one signature of every advantage estimator. Every argument is passed, by keyword; an
    estimator reads the ones it needs and ignores the rest (end its signature with ``**_``). An
    input the batch does not hold is None: raise naming it (:func:`rlloom.algos.advantages.need`).

    - ``scores`` [N] float32: each response's sequence score (an empty response keeps its score);
    - ``token_level_rewards`` [N, R] float32: rewards placed on tokens (the score on the last
      token), after any KL penalty in the reward;
    - ``response_mask`` [N, R]: 1 on response tokens;
    - ``group_ids``: N hashables, equal for the responses to one prompt (the batch's ``uid``);
    - ``baselines`` [N] or None: a baseline score per response (ReMax: the greedy response's);
    - ``gamma``: the discount of token-level returns;
    - ``norm_by_std`` / ``eps``: divide by the group's std (+ eps), where an estimator groups.

    Returns the advantages [N, R] float32, 0 on padding.
    """

    def __call__(
        self,
        *,
        scores: Optional[torch.Tensor],
        token_level_rewards: Optional[torch.Tensor],
        response_mask: torch.Tensor,
        group_ids: Optional[Sequence[Hashable]],
        baselines: Optional[torch.Tensor],
        gamma: float,
        norm_by_std: bool,
        eps: float,
    ) -> torch.Tensor: ...


class PolicyLoss(Protocol):
    """The one signature of every policy loss: per-token terms from the current ``log_probs``, the
    behaviour ``old_log_probs`` (constants), ``advantages`` and the ``response_mask`` (all [B, R])
    and the clip settings of :class:`rlloom.algos.config.PolicyLossConfig`, by keyword. Returns
    :class:`rlloom.losses.ClipLossTerms` (loss, clip indicators, per-token log π_old − log π), all
    0 on padding; :func:`rlloom.algos.policy_loss.make_policy_loss_fn` aggregates them and adds
    the entropy and KL terms."""

    def __call__(
        self,
        log_probs: torch.Tensor,
        old_log_probs: torch.Tensor,
        advantages: torch.Tensor,
        response_mask: torch.Tensor,
        *,
        clip_ratio_low: float,
        clip_ratio_high: float,
        clip_ratio_c: Optional[float],
    ) -> ClipLossTerms: ...


def _lookup(kind: str, name: str, registry: Registry | None) -> Any:
    from rlloom.plugins.registry import get_registry

    return (registry or get_registry()).get(kind, name).factory


def get_advantage_estimator(name: str, registry: Registry | None = None) -> AdvantageEstimator:
    """The advantage estimator registered as ``name`` (in ``registry``, by default the process's);
    an unknown name raises :class:`rlloom.plugins.registry.UnknownPluginError` listing the
    installed ones."""
    return _lookup(ADVANTAGE_ESTIMATOR, name, registry)


def get_policy_loss(name: str, registry: Registry | None = None) -> PolicyLoss:
    """The policy loss registered as ``name``; an unknown name raises
    :class:`rlloom.plugins.registry.UnknownPluginError` listing the installed ones."""
    return _lookup(POLICY_LOSS, name, registry)
