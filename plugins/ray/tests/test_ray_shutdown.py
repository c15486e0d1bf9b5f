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


@pytest.mark.slow
def test_pools_larger_than_the_local_cluster_are_refused_at_once(without_ray_cluster, tmp_path):
    """A local cluster of 2 CPUs, the actor's pool of 1 and a rollout pool of 2: the rollout pool is refused as
    soon as it is asked for (naming the pool and the settings), not after launcher.start_timeout_s; following the
    advice (launcher.num_cpus=3) the run trains, and the cluster is shut down both times."""
    torch.set_num_threads(1)
    pools = ["launcher=ray", "+launcher.resource_pools.gen=2", "+launcher.mapping.rollout=gen",
             "trainer.async_mode=one_step_off", "launcher.start_timeout_s=300"]
    with pytest.raises(RuntimeError, match=r"launcher\.resource_pools\.gen: 2 x .* 2 CPU in all, 1 held by the "
                                           r"pools started before it \(global: 1\); raise launcher\.num_cpus"):
        run_tiny(str(tmp_path / "small"), str(tmp_path / "cache"), *pools, "launcher.num_cpus=2")
    assert not ray.is_initialized()
    rows = run_tiny(str(tmp_path / "fits"), str(tmp_path / "cache"), *pools, "launcher.num_cpus=3")
    assert [row["step"] for row in rows if row["step"] > 0] == [1, 2]
    assert not ray.is_initialized()
