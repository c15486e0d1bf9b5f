"""GRPO for rlloom (``algorithm=grpo``): GRPO's step, its config and the pass@k advantage. The
group-relative advantage and the clipped policy loss it uses are the core's (:mod:`rlloom.algos`)."""

from rlloom.lazy import lazy_exports

__all__ = ["GRPO", "GRPOConfig", "GRPOStepConfig", "passk_advantages"]

__getattr__ = lazy_exports(__name__, {  # imported on first use: the plugin registers without torch
    "passk_advantages": ".advantages",
    "GRPO": ".algorithm",
    "GRPOConfig": ".config",
    "GRPOStepConfig": ".config",
})
