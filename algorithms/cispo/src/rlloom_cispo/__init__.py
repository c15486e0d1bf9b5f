"""CISPO for rlloom: ``algorithm=cispo``."""

from rlloom.lazy import lazy_exports

__all__ = ["CISPO", "CISPOConfig", "cispo_token_loss"]

__getattr__ = lazy_exports(__name__, {  # imported on first use: the plugin registers without torch
    "CISPO": ".algorithm",
    "CISPOConfig": ".config",
    "cispo_token_loss": ".loss",
})
