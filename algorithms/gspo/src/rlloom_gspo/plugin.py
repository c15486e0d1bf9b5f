"""Entry point ``gspo``: registers ``algorithm=gspo`` and the policy loss ``gspo``."""

import rlloom
from rlloom_gspo.config import GSPOConfig


@rlloom.hookimpl
def register_algorithms(register):
    register("gspo", "rlloom_gspo.algorithm:GSPO", config=GSPOConfig)


@rlloom.hookimpl
def register_policy_losses(register):
    register("gspo", "rlloom_gspo.loss:gspo_policy_loss")
