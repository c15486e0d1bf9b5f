"""Entry point ``reinforce_pp``: registers ``algorithm=reinforce_pp`` and ``algorithm=reinforce_pp_baseline``."""

import rlloom
from rlloom_reinforce_pp.algorithm import ReinforcePP, ReinforcePPBaseline
from rlloom_reinforce_pp.config import ReinforcePPConfig


@rlloom.hookimpl
def register_algorithms(register):
    register("reinforce_pp", ReinforcePP, config=ReinforcePPConfig)
    register("reinforce_pp_baseline", ReinforcePPBaseline, config=ReinforcePPConfig)
