"""``jsonl`` tracker: one JSON object per logged step in ``<run_dir>/metrics.jsonl``."""

from __future__ import annotations

import json
import math
import os

from rlloom_trainer.checkpoint import write_atomic


class JsonlTracker:
    """Appends ``{"step": step, **metrics}`` lines; non-finite floats are written as null."""

    def __init__(self, run_dir: str, config: dict) -> None:
        os.makedirs(run_dir, exist_ok=True)
        self.path = os.path.join(run_dir, "metrics.jsonl")
        self._file = open(self.path, "a", encoding="utf-8")

    def log(self, metrics: dict[str, float], step: int) -> None:
        row = {"step": step}
        for key, value in metrics.items():
            row[key] = None if isinstance(value, float) and not math.isfinite(value) else value
        self._file.write(json.dumps(row) + "\n")
        self._file.flush()

    def rewind(self, step: int) -> str | None:
        """Drop the lines of steps after ``step`` and a torn last line left by a killed process; the
        file is replaced atomically. Returns what was dropped, in words (None: nothing)."""
        self._file.close()
        kept, dropped_steps, torn = [], [], 0
        with open(self.path, encoding="utf-8") as handle:
            for line in handle:
                try:
                    row = json.loads(line)
                except ValueError:
                    torn += 1
                    continue
                if not line.endswith("\n"):
                    torn += 1
                elif row.get("step", 0) <= step:
                    kept.append(line)
                else:
                    dropped_steps.append(row.get("step"))
        write_atomic(self.path, "".join(kept).encode("utf-8"))
        self._file = open(self.path, "a", encoding="utf-8")
        parts = []
        if dropped_steps:
            span = f"{min(dropped_steps)}-{max(dropped_steps)}" if len(set(dropped_steps)) > 1 else dropped_steps[0]
            rows = f"{len(dropped_steps)} row{'s' if len(dropped_steps) > 1 else ''}"
            parts.append(f"{rows} (step{'s' if len(set(dropped_steps)) > 1 else ''} {span})")
        if torn:
            parts.append(f"{torn} torn line{'s' if torn > 1 else ''}")
        return f"{' and '.join(parts)} of metrics.jsonl" if parts else None

    def close(self) -> None:
        self._file.close()
