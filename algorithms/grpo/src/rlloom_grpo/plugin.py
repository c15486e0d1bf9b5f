"""Entry point ``grpo``: registers ``algorithm=grpo`` and the advantage estimator ``grpo_passk``
(the estimator ``grpo`` and the policy loss ``vanilla`` are the core's)."""

import rlloom
from rlloom_grpo.config import GRPOConfig


@rlloom.hookimpl
def register_algorithms(register):
    register("grpo", "rlloom_grpo.algorithm:GRPO", config=GRPOConfig)


@rlloom.hookimpl
def register_advantage_estimators(register):
    register("grpo_passk", "rlloom_grpo.advantages:passk_estimator")
