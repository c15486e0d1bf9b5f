"""Entry point ``reinforce_pp``: registers ``algorithm=reinforce_pp`` and ``algorithm=reinforce_pp_baseline``."""

import rlloom
from rlloom_reinforce_pp.config import ReinforcePPConfig


@rlloom.hookimpl
def register_algorithms(register):
    register("reinforce_pp", "rlloom_reinforce_pp.algorithm:ReinforcePP", config=ReinforcePPConfig)
    register("reinforce_pp_baseline", "rlloom_reinforce_pp.algorithm:ReinforcePPBaseline",
             config=ReinforcePPConfig)
