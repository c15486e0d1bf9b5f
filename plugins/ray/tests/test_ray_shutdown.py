"""A worker process that dies mid-run: a clear error, a bounded exit, and the Ray cluster the
launcher started is shut down (fault injected with the seam ``RLLOOM_RAY_FAULT``)."""

from __future__ import annotations

import os

import pytest
import torch
from ray_test_helpers import run_tiny, seconds_since_last_row

os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")
ray = pytest.importorskip("ray")

from rlloom_ray import WorkerError  # noqa: E402


@pytest.mark.slow
def test_a_dead_worker_stops_the_run_and_ray(without_ray_cluster, tmp_path, monkeypatch):
    torch.set_num_threads(1)
    assert not ray.is_initialized()  # the launcher starts (and must stop) its own cluster
    monkeypatch.setenv("RLLOOM_RAY_FAULT", "actor:train_step:2:exit")
    with pytest.raises(WorkerError) as caught:
        run_tiny(str(tmp_path / "run"), str(tmp_path / "cache"), "launcher=ray", "launcher.num_cpus=2",
                 "+launcher.resource_pools.gen=1", "+launcher.mapping.rollout=gen", "resharder=safetensors", steps=3)
    elapsed = seconds_since_last_row(str(tmp_path / "run"))  # the worker died in step 2, after step 1's row
    assert str(caught.value).startswith("Ray worker for role 'actor' rank 0 died during train_step():")
    assert elapsed < 60, elapsed
    assert not ray.is_initialized()
