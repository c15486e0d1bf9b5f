"""Shared by the rlloom-ray tests: a short tiny GRPO run, whether a cluster's CPUs are free again, and how long a
failure took to surface."""

from __future__ import annotations

import os
import time

from rlloom_trainer.testing import train_tiny


def run_tiny(run_dir: str, cache_dir: str, *overrides: str, steps: int = 2) -> list[dict]:
    """``preset=tiny`` for ``steps`` steps, logging to ``metrics.jsonl`` only; returns its rows."""
    return train_tiny(run_dir, f"trainer.total_steps={steps}", "trainer.trackers=[jsonl]", *overrides,
                      cache_dir=cache_dir)


def seconds_since_last_row(run_dir: str) -> float:
    """Seconds since the run last wrote ``metrics.jsonl`` (the row of the last step it finished): how long the
    failure that ended it took to surface, the start-up before (Ray, workers, the model) not counted."""
    return time.time() - os.path.getmtime(os.path.join(run_dir, "metrics.jsonl"))


def cpus_freed(total: float, wait_s: float = 10.0) -> bool:
    """Whether the cluster shows all ``total`` CPUs free again within ``wait_s`` (Ray reports with a lag)."""
    import ray

    deadline = time.monotonic() + wait_s
    while ray.available_resources().get("CPU", 0) != total:
        if time.monotonic() > deadline:
            return False
        time.sleep(0.2)
    return True
