"""GRPO for rlloom: group-relative advantages and the clipped policy loss (``algorithm=grpo``)."""

from rlloom.lazy import lazy_exports

__all__ = ["GRPO", "GRPOConfig", "group_relative_advantages", "make_policy_loss_fn", "passk_advantages"]

__getattr__ = lazy_exports(__name__, {  # imported on first use: the plugin registers without torch
    "group_relative_advantages": ".advantages",
    "passk_advantages": ".advantages",
    "GRPO": ".algorithm",
    "GRPOConfig": ".config",
    "make_policy_loss_fn": ".loss",
})
