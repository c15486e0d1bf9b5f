"""Entry point ``remax``: registers ``algorithm=remax`` and the advantage estimator ``remax``."""

import rlloom
from rlloom_remax.config import ReMaxConfig


@rlloom.hookimpl
def register_algorithms(register):
    register("remax", "rlloom_remax.algorithm:ReMax", config=ReMaxConfig)


@rlloom.hookimpl
def register_advantage_estimators(register):
    register("remax", "rlloom_remax.advantages:remax_estimator")
