"""REINFORCE++ for rlloom: ``algorithm=reinforce_pp`` and ``algorithm=reinforce_pp_baseline``."""

from rlloom.lazy import lazy_exports

__all__ = [
    "ReinforcePP",
    "ReinforcePPBaseline",
    "ReinforcePPConfig",
    "reinforce_pp_advantages",
    "reinforce_pp_baseline_advantages",
]

__getattr__ = lazy_exports(__name__, {  # imported on first use: the plugin registers without torch
    "reinforce_pp_advantages": ".advantages",
    "reinforce_pp_baseline_advantages": ".advantages",
    "ReinforcePP": ".algorithm",
    "ReinforcePPBaseline": ".algorithm",
    "ReinforcePPConfig": ".config",
})
