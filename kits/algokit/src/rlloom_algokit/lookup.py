"""The name → function tables of advantage estimators and policy losses (their signatures:
:class:`rlloom.protocols.AdvantageEstimator`, :class:`rlloom.protocols.PolicyLoss`).

Plugins fill both through hooks, as they register everything else
(:mod:`rlloom.plugins.hookspecs`)::

    @rlloom.hookimpl
    def register_advantage_estimators(register):
        register("rloo", "rlloom_grpo.advantages:rloo_estimator")

    @rlloom.hookimpl
    def register_policy_losses(register):
        register("cispo", "rlloom_grpo.losses:cispo_token_loss")

(a function, or ``"module:attribute"`` naming one, imported when first looked up). The config
keys ``algorithm.adv_estimator`` and ``algorithm.policy_loss`` are checked against these tables
when a config is composed (:func:`rlloom.config.compose.check_registered_names`).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from rlloom.plugins.registry import Registry
    from rlloom.protocols import AdvantageEstimator, PolicyLoss

ADVANTAGE_ESTIMATOR = "advantage_estimator"
"""The registry kind of advantage estimators (hook ``register_advantage_estimators``)."""

POLICY_LOSS = "policy_loss"
"""The registry kind of policy losses (hook ``register_policy_losses``)."""


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
