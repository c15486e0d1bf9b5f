"""Entry point ``algokit``: registers the two functions the shared algorithm configs name by default,
the advantage estimator ``grpo`` (:func:`rlloom_algokit.advantages.grpo_estimator`, the default of
:class:`rlloom_algokit.grpo_config.GRPOConfig`) and the policy loss ``vanilla``
(:func:`rlloom_algokit.policy_loss.vanilla_policy_loss`, the default of
:class:`rlloom_algokit.config.PolicyLossConfig`). They are registered here, where their code is, so
that every algorithm whose config names them finds them whichever algorithm plugins are installed;
the kit registers nothing else (no algorithm, no config-group option)."""

import rlloom
from rlloom_algokit.config import DEFAULT_POLICY_LOSS


@rlloom.hookimpl
def register_advantage_estimators(register):
    register("grpo", "rlloom_algokit.advantages:grpo_estimator")


@rlloom.hookimpl
def register_policy_losses(register):
    register(DEFAULT_POLICY_LOSS, "rlloom_algokit.policy_loss:vanilla_policy_loss")
