"""REINFORCE++ for rlloom: ``algorithm=reinforce_pp`` and ``algorithm=reinforce_pp_baseline``."""

from rlloom_reinforce_pp.advantages import (
    reinforce_pp_advantages,
    reinforce_pp_baseline_advantages,
)
from rlloom_reinforce_pp.algorithm import ReinforcePP, ReinforcePPBaseline
from rlloom_reinforce_pp.config import ReinforcePPConfig

__all__ = [
    "ReinforcePP",
    "ReinforcePPBaseline",
    "ReinforcePPConfig",
    "reinforce_pp_advantages",
    "reinforce_pp_baseline_advantages",
]
