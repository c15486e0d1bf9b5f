"""A worker that raises or stops answering surfaces as a WorkerError naming role, rank and method,
within a bounded time, and the run's workers and placement groups are released.

Faults are injected with the worker's documented seam ``RLLOOM_RAY_FAULT``."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from ray_test_helpers import cpus_freed, run_tiny, seconds_since_last_row

os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")
ray = pytest.importorskip("ray")

from rlloom.errors import RoleStartError  # noqa: E402
from rlloom_ray import WorkerError  # noqa: E402



def test_a_raising_worker_names_role_rank_and_remote_traceback(ray_cluster, tmp_path, monkeypatch):
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
def test_a_hung_worker_times_out(ray_cluster, tmp_path, monkeypatch):
    monkeypatch.setenv("RLLOOM_RAY_FAULT", "rollout:generate:2:hang")
    # launcher.call_timeout_s bounds calls only: the workers' start-up (model build) has its own bound, so a
    # loaded machine's slow start cannot trip this 15 s limit.
    with pytest.raises(WorkerError, match=r"role 'rollout' rank 0 did not answer within 15 s during generate\(\)") \
            as caught:
        run_tiny(str(tmp_path / "run"), str(tmp_path / "cache"), "launcher=ray", "launcher.call_timeout_s=15")
    assert "see launcher.call_timeout_s" in str(caught.value)
    assert seconds_since_last_row(str(tmp_path / "run")) < 15 + 30  # the hang began after step 1's row
    assert cpus_freed(4)  # the hung worker was killed, not waited for


@pytest.mark.slow
def test_a_worker_hung_while_starting_names_the_start_timeout(ray_cluster, tmp_path, monkeypatch):
    # The actor is the first role built: only its worker's start-up and its build count against the bound, and a
    # start-up slower than the bound (a loaded machine) ends in the same error as the hang.
    monkeypatch.setenv("RLLOOM_RAY_FAULT", "actor:build:1:hang")
    with pytest.raises(RoleStartError) as caught:
        run_tiny(str(tmp_path / "run"), str(tmp_path / "cache"), "launcher=ray", "launcher.start_timeout_s=8")
    assert str(caught.value).startswith("the actor role (train_engine=")
    assert ("could not start: WorkerError: Ray worker for role 'actor' rank 0 did not answer within 8 s during "
            "build(): ranks still running: [0] (pool 'global'; see launcher.start_timeout_s)") in str(caught.value)
    assert cpus_freed(4)


@pytest.mark.slow
def test_the_command_line_names_the_failed_worker_in_one_paragraph(tmp_path):
    # The real console script with its own Ray cluster: no traceback, exit status 3.
    rlloom = Path(sys.executable).parent / "rlloom"
    env = {**os.environ, "RLLOOM_RAY_FAULT": "actor:train_step:2:raise", "RAY_USAGE_STATS_ENABLED": "0"}
    env.pop("RLLOOM_DEBUG", None)
    result = subprocess.run([str(rlloom), "train", "preset=tiny", "launcher=ray", "launcher.num_cpus=2",
                             "trainer.total_steps=3", "trainer.trackers=[jsonl]", f"trainer.run_dir={tmp_path / 'run'}",
                             f"model.cache_dir={tmp_path / 'cache'}"],
                            env=env, capture_output=True, text=True, timeout=600)
    assert result.returncode == 3, result.stderr[-2000:]
    assert result.stderr.endswith(
        "rlloom: error: Ray worker for role 'actor' rank 0 raised during train_step(): RuntimeError: RLLOOM_RAY_FAULT: "
        "injected failure in actor.train_step call 2 (set RLLOOM_DEBUG=1 for the worker's traceback)\n"), \
        result.stderr[-2000:]
    assert "Traceback" not in result.stderr
