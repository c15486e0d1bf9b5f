"""ReMax for rlloom (``algorithm=remax``): REINFORCE with a greedy-rollout baseline."""

from rlloom.lazy import lazy_exports

__all__ = ["ReMax", "ReMaxConfig", "remax_advantages"]

__getattr__ = lazy_exports(__name__, {  # imported on first use: the plugin registers without torch
    "remax_advantages": ".advantages",
    "ReMax": ".algorithm",
    "ReMaxConfig": ".config",
})
