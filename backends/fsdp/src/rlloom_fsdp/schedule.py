"""The learning-rate schedule: a pure function of the optimizer step number."""

from __future__ import annotations

import math

from rlloom_fsdp.config import LR_SCHEDULES


def lr_factor(step: int, *, schedule: str, warmup_steps: int, total_steps: int, min_lr_ratio: float) -> float:
    """Multiplier of the base LR for optimizer step ``step`` (1-based: the first step is 1).

    Warm-up: ``step / warmup_steps`` while ``step <= warmup_steps`` (no step runs at LR 0; the
    last warm-up step reaches the full LR). After warm-up:

    - ``constant``: 1.
    - ``cosine``: ``min_lr_ratio + (1 - min_lr_ratio) * (1 + cos(pi * p)) / 2`` with progress
      ``p = (step - 1 - warmup_steps) / (total_steps - warmup_steps)`` clamped to [0, 1], so the
      first step after warm-up uses the full LR and steps past ``total_steps`` stay at the floor.
      Needs ``total_steps > warmup_steps``.
    """
    if step < 1:
        raise ValueError(f"lr_factor: step is 1-based, got {step}")
    if step <= warmup_steps:
        return step / warmup_steps
    if schedule == "constant":
        return 1.0
    if schedule == "cosine":
        if total_steps <= warmup_steps:
            raise ValueError(
                f"lr_schedule='cosine' needs total_steps > warmup_steps, got total_steps={total_steps} "
                f"and warmup_steps={warmup_steps}"
            )
        progress = min(1.0, (step - 1 - warmup_steps) / (total_steps - warmup_steps))
        return min_lr_ratio + (1.0 - min_lr_ratio) * 0.5 * (1.0 + math.cos(math.pi * progress))
    raise ValueError(f"unknown lr_schedule {schedule!r}; choose one of {list(LR_SCHEDULES)}")
