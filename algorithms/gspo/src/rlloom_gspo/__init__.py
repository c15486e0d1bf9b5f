"""GSPO for rlloom (``algorithm=gspo``): sequence-level importance ratio and clipping."""

from rlloom.lazy import lazy_exports

__all__ = ["GSPO", "GSPOConfig", "gspo_policy_loss"]

__getattr__ = lazy_exports(__name__, {  # imported on first use: the plugin registers without torch
    "GSPO": ".algorithm",
    "GSPOConfig": ".config",
    "gspo_policy_loss": ".loss",
})
