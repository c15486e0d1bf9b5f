"""What the trackers share: which values are loggable scalars, the run's name, and their optional libraries."""

from __future__ import annotations

import importlib
import math
import os
from types import ModuleType

from rlloom.plugins.registry import extras


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


def library(tracker: str, module: str) -> ModuleType:
    """``module`` imported; when it (or what it needs) cannot be imported, ImportError naming the library that
    rlloom-trainer's extra ``tracker`` requires, as a pip command (the trainer then disables the tracker with that
    message)."""
    try:
        return importlib.import_module(module)
    except ImportError as error:
        requirements = " ".join(repr(requirement) for requirement in extras("rlloom-trainer").get(tracker, []))
        raise ImportError(f"trainer.trackers=[{tracker}] cannot start ({error}): pip install {requirements}") from error


