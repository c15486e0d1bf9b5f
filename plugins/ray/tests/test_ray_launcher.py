"""launcher=ray end to end on a real local Ray cluster: colocated, split and FSDP world size 2 (colocated)
runs give the local launcher's metrics for the same seed. World size 2 with the rollout on its own pool:
test_ray_sync.py (resharder=broadcast, against the local metrics) and test_ray_checkpoint.py
(resharder=safetensors, every sync checked)."""

from __future__ import annotations

import os

import pytest
from ray_test_helpers import assert_close_rows, cpus_freed, run_tiny
from rlloom_trainer.testing import comparable_rows

os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")
ray = pytest.importorskip("ray")

SPLIT = ["+launcher.resource_pools.gen=1", "+launcher.mapping.rollout=gen", "resharder=safetensors"]


@pytest.fixture(scope="module")
def expected(local_rows):
    """The local run's rows (conftest.py) less what differs between two runs of one seed."""
    return comparable_rows(local_rows)


def test_colocated_equals_local(ray_cluster, cache, expected, tmp_path):
    # One worker process hosts actor and rollout; the in_process resharder runs inside it. Same seed,
    # same fp32 kernels on one thread, tensors moved by pickling only: the metrics are bit-equal.
    rows = comparable_rows(run_tiny(str(tmp_path), cache, "launcher=ray"))
    assert [row["step"] for row in rows] == [row["step"] for row in expected] == [0, 1, 2]
    assert rows == expected
    assert cpus_freed(4)  # the run's placement group and worker are gone


def test_split_with_safetensors_equals_local(ray_cluster, cache, expected, tmp_path):
    # Rollout in its own process; weights travel as safetensors files. Bit-equal as above.
    rows = run_tiny(str(tmp_path), cache, "launcher=ray", *SPLIT)
    assert comparable_rows(rows) == expected
    assert all(row["perf/weight_sync_bytes"] > 0 for row in rows if row["step"] > 0)


def test_reward_on_its_own_pool_equals_local(ray_cluster, cache, expected, tmp_path):
    # The reward function is a role like the engines: here it runs in its own Ray worker process
    # (as a reward model would on its own pool), called with the batch; same scores as in-process.
    rows = run_tiny(str(tmp_path), cache, "launcher=ray", "+launcher.resource_pools.rm=1", "+launcher.mapping.reward=rm")
    assert comparable_rows(rows) == expected


@pytest.mark.slow
def test_fsdp_world_size_2_colocated_matches_local(ray_cluster, cache, expected, tmp_path):
    # Actor and rollout share a pool of 2 processes: each rank generates its half of the prompts
    # (seeded by prompt index, so the samples are the local ones) and trains on its half of the rows.
    rows = comparable_rows(run_tiny(str(tmp_path), cache, "launcher=ray", "+launcher.resource_pools.global=2"))
    assert_close_rows(rows, expected)

