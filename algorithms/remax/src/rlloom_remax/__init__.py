"""ReMax for rlloom (``algorithm=remax``): REINFORCE with a greedy-rollout baseline."""

from rlloom_remax.advantages import remax_advantages
from rlloom_remax.algorithm import ReMax
from rlloom_remax.config import ReMaxConfig

__all__ = ["ReMax", "ReMaxConfig", "remax_advantages"]
