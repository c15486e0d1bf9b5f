"""RLOO for rlloom (``algorithm=rloo``): REINFORCE with a leave-one-out group baseline."""

from rlloom.lazy import lazy_exports

__all__ = ["RLOO", "RLOOConfig", "rloo_advantages"]

__getattr__ = lazy_exports(__name__, {  # imported on first use: the plugin registers without torch
    "rloo_advantages": ".advantages",
    "RLOO": ".algorithm",
    "RLOOConfig": ".config",
})
