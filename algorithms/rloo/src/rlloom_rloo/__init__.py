"""RLOO for rlloom (``algorithm=rloo``): REINFORCE with a leave-one-out group baseline."""

from rlloom_rloo.advantages import rloo_advantages
from rlloom_rloo.algorithm import RLOO
from rlloom_rloo.config import RLOOConfig

__all__ = ["RLOO", "RLOOConfig", "rloo_advantages"]
