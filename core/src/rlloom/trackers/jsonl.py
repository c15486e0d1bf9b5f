"""``jsonl`` tracker: one JSON object per logged step in ``<run_dir>/metrics.jsonl``."""

from __future__ import annotations

import json
import math
import os


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

    def close(self) -> None:
        self._file.close()
