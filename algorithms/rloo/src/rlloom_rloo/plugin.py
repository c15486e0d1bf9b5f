"""Entry point ``rloo``: registers ``algorithm=rloo`` and the advantage estimator ``rloo``."""

import rlloom
from rlloom_rloo.config import RLOOConfig


@rlloom.hookimpl
def register_algorithms(register):
    register("rloo", "rlloom_rloo.algorithm:RLOO", config=RLOOConfig)


@rlloom.hookimpl
def register_advantage_estimators(register):
    register("rloo", "rlloom_rloo.advantages:rloo_estimator")
