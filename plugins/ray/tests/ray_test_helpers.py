"""Shared by the rlloom-ray tests: a tiny GRPO run and the metrics that must match across launchers."""

from __future__ import annotations

import json
import os
import time

import rlloom

NOT_COMPARED = ("timing_s/", "perf/", "training/wall_clock_s")


def run_tiny(run_dir: str, cache_dir: str, *overrides: str, steps: int = 2) -> list[dict]:
    """``preset=tiny`` for ``steps`` steps; returns the rows of ``metrics.jsonl``."""
    rlloom.train(["preset=tiny", f"trainer.total_steps={steps}", f"trainer.run_dir={run_dir}",
                  f"model.cache_dir={cache_dir}", "trainer.trackers=[jsonl]", *overrides])
    return metric_rows(run_dir)


def metric_rows(run_dir: str) -> list[dict]:
    """The rows of ``<run_dir>/metrics.jsonl``."""
    with open(os.path.join(run_dir, "metrics.jsonl"), encoding="utf-8") as f:
        return [json.loads(line) for line in f]


def comparable(rows: list[dict]) -> list[dict]:
    """Each row without timings, memory and throughput (which differ between processes)."""
    return [{key: value for key, value in row.items() if not key.startswith(NOT_COMPARED)} for row in rows]


def cpus_freed(total: float, wait_s: float = 10.0) -> bool:
    """Whether the cluster shows all ``total`` CPUs free again within ``wait_s`` (Ray reports with a lag)."""
    import ray

    deadline = time.monotonic() + wait_s
    while ray.available_resources().get("CPU", 0) != total:
        if time.monotonic() > deadline:
            return False
        time.sleep(0.2)
    return True
