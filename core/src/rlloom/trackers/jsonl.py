"""``jsonl`` tracker: one JSON object per logged step in ``<run_dir>/metrics.jsonl``."""

from __future__ import annotations

import json
import math
import os

from rlloom.checkpoint import write_atomic


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

    def rewind(self, step: int) -> None:
        """Drop the lines of steps after ``step`` and a torn last line left by a killed process; the
        file is replaced atomically."""
        self._file.close()
        kept = []
        with open(self.path, encoding="utf-8") as handle:
            for line in handle:
                try:
                    row = json.loads(line)
                except ValueError:
                    continue
                if line.endswith("\n") and row.get("step", 0) <= step:
                    kept.append(line)
        write_atomic(self.path, "".join(kept).encode("utf-8"))
        self._file = open(self.path, "a", encoding="utf-8")

    def close(self) -> None:
        self._file.close()
