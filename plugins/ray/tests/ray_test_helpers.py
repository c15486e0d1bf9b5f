"""Shared by the rlloom-ray tests: a short tiny GRPO run, its rows compared within fp32 rounding, whether a
cluster's CPUs are free again, and how long a failure took to surface."""

from __future__ import annotations

import math
import os
import time

from rlloom_trainer.testing import train_tiny


def run_tiny(run_dir: str, cache_dir: str, *overrides: str, steps: int = 2) -> list[dict]:
    """``preset=tiny`` for ``steps`` steps, logging to ``metrics.jsonl`` only; returns its rows."""
    return train_tiny(run_dir, f"trainer.total_steps={steps}", "trainer.trackers=[jsonl]", *overrides,
                      cache_dir=cache_dir)


def assert_close_rows(rows: list[dict], expected_rows: list[dict]) -> None:
    """Same steps and keys, values within fp32 reduction-order rounding (relative 1e-4, absolute 1e-6)."""
    assert len(rows) == len(expected_rows)
    for row, expected in zip(rows, expected_rows):
        assert row.keys() == expected.keys()
        for key, value in expected.items():
            assert math.isclose(row[key], value, rel_tol=1e-4, abs_tol=1e-6), (row["step"], key, row[key], value)


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
