"""Entry point ``reinforce_pp``: registers ``algorithm=reinforce_pp`` and ``algorithm=reinforce_pp_baseline``,
and the advantage estimators of the same names."""

import rlloom
from rlloom_reinforce_pp.config import ReinforcePPConfig


@rlloom.hookimpl
def register_algorithms(register):
    register("reinforce_pp", "rlloom_reinforce_pp.algorithm:ReinforcePP", config=ReinforcePPConfig)
    register("reinforce_pp_baseline", "rlloom_reinforce_pp.algorithm:ReinforcePPBaseline",
             config=ReinforcePPConfig)


@rlloom.hookimpl
def register_advantage_estimators(register):
    register("reinforce_pp", "rlloom_reinforce_pp.advantages:reinforce_pp_estimator")
    register("reinforce_pp_baseline", "rlloom_reinforce_pp.advantages:reinforce_pp_baseline_estimator")
