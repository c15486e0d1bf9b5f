"""Supervised fine-tuning for rlloom: ``algorithm=sft``."""

from rlloom.lazy import lazy_exports

__all__ = ["SFT", "SFTConfig", "demonstration_batch", "demonstration_texts", "make_sft_loss_fn"]

__getattr__ = lazy_exports(__name__, {  # imported on first use: the plugin registers without torch
    "SFT": ".algorithm",
    "SFTConfig": ".config",
    "demonstration_batch": ".demonstrations",
    "demonstration_texts": ".demonstrations",
    "make_sft_loss_fn": ".loss",
})
