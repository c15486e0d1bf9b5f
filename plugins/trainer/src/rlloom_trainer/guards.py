"""Guard against a run that keeps producing non-finite updates.

The train engines skip an update whose gradient norm is not finite and report
``<role>/skipped_update`` (the fraction of the step's optimizer steps that were skipped). A step is
*non-finite* when any actor or critic update of it was skipped or its actor/critic loss metrics
are not finite. After ``max_consecutive`` non-finite steps in a row the run stops with
:class:`TrainingAborted`, after writing that step's metrics to ``<run_dir>/nonfinite_step_<N>.json``.
"""

from __future__ import annotations

import json
import math
import os

from rlloom.errors import RunFailedError

SKIP_KEYS = ("actor/skipped_update", "critic/skipped_update")
LOSS_KEYS = ("actor/pg_loss", "critic/vf_loss")


class TrainingAborted(RunFailedError):
    """The run stopped itself (e.g. too many non-finite steps); the message says why and where the
    diagnostics are."""


def is_nonfinite_step(metrics: dict[str, float]) -> bool:
    """Whether a step's metrics show a skipped update or a non-finite loss."""
    skipped = any(metrics.get(key, 0.0) > 0 for key in SKIP_KEYS)
    bad_loss = any(key in metrics and not math.isfinite(metrics[key]) for key in LOSS_KEYS)
    return skipped or bad_loss


class NonFiniteGuard:
    """Counts consecutive non-finite steps; ``max_consecutive == 0`` never aborts."""

    def __init__(self, max_consecutive: int, run_dir: str, consecutive: int = 0) -> None:
        if max_consecutive < 0:
            raise ValueError(f"trainer.max_nonfinite_steps must be >= 0, got {max_consecutive}")
        self.max_consecutive = max_consecutive
        self.run_dir = run_dir
        self.consecutive = consecutive

    def check(self, step: int, metrics: dict[str, float]) -> None:
        """Update the count with ``step``'s metrics; raise :class:`TrainingAborted` at the limit."""
        self.consecutive = self.consecutive + 1 if is_nonfinite_step(metrics) else 0
        if self.max_consecutive and self.consecutive >= self.max_consecutive:
            path = os.path.join(self.run_dir, f"nonfinite_step_{step}.json")
            with open(path, "w", encoding="utf-8") as handle:
                json.dump({"step": step, "metrics": {k: _json_float(v) for k, v in metrics.items()}}, handle,
                          indent=1, sort_keys=True)
            raise TrainingAborted(
                f"step {step}: {self.consecutive} steps in a row had a skipped (non-finite) update or a "
                f"non-finite loss (trainer.max_nonfinite_steps={self.max_consecutive}); the step's metrics "
                f"are in {path}"
            )


def _json_float(value: float) -> float | str:
    return value if not isinstance(value, float) or math.isfinite(value) else repr(value)
