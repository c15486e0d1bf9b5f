"""A worker that raises or stops answering surfaces as a WorkerError naming role, rank and method,
within a bounded time, and the run's workers and placement groups are released.

Faults are injected with the worker's documented seam ``RLLOOM_RAY_FAULT``."""

from __future__ import annotations

import os
import time

import pytest
from ray_test_helpers import cpus_freed, run_tiny

os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")
ray = pytest.importorskip("ray")

from rlloom_ray import WorkerError  # noqa: E402



def test_a_raising_worker_names_role_rank_and_remote_traceback(cluster, tmp_path, monkeypatch):
    monkeypatch.setenv("RLLOOM_RAY_FAULT", "actor:train_step:2:raise")
    with pytest.raises(WorkerError) as caught:
        run_tiny(str(tmp_path / "run"), str(tmp_path / "cache"), "launcher=ray", steps=3)
    message = str(caught.value)
    assert message.startswith("Ray worker for role 'actor' rank 0 raised during train_step():")
    assert "ray::Worker.timed_call()" in message and "in _maybe_fault" in message  # the remote frames
    assert "RuntimeError: RLLOOM_RAY_FAULT: injected failure in actor.train_step call 2" in message
    assert "\x1b[" not in message
    assert (caught.value.role, caught.value.rank, caught.value.method) == ("actor", 0, "train_step")
    assert cpus_freed(4)


@pytest.mark.slow
def test_a_hung_worker_times_out(cluster, tmp_path, monkeypatch):
    monkeypatch.setenv("RLLOOM_RAY_FAULT", "rollout:generate:2:hang")
    start = time.monotonic()
    with pytest.raises(WorkerError, match=r"role 'rollout' rank 0 did not answer within 15 s during generate\(\)"):
        run_tiny(str(tmp_path / "run"), str(tmp_path / "cache"), "launcher=ray", "launcher.call_timeout_s=15")
    assert time.monotonic() - start < 60
    assert cpus_freed(4)  # the hung worker was killed, not waited for
