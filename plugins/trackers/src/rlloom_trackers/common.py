"""What every tracker here shares: which values are loggable scalars, and the run's name."""

from __future__ import annotations

import math
import os


def finite_scalars(metrics: dict) -> dict[str, float]:
    """The metrics that are finite numbers (ints and bools included), as floats."""
    return {
        key: float(value)
        for key, value in metrics.items()
        if isinstance(value, (int, float)) and math.isfinite(float(value))
    }


def run_name(run_dir: str) -> str:
    """The run folder's name (``runs/20261122-010203`` → ``20261122-010203``)."""
    return os.path.basename(os.path.normpath(os.path.abspath(run_dir)))
