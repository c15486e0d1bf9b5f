"""launcher=ray end to end on a real local Ray cluster: colocated, split and FSDP world size 2
runs give the local launcher's metrics for the same seed."""

from __future__ import annotations

import math
import os

import pytest
from ray_test_helpers import cpus_freed, run_tiny
from rlloom_trainer.testing import comparable_rows

os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")
ray = pytest.importorskip("ray")

SPLIT = ["+launcher.resource_pools.gen=1", "+launcher.mapping.rollout=gen", "resharder=safetensors"]




@pytest.fixture(scope="module")
def local_rows(tmp_path_factory, cache):
    return comparable_rows(run_tiny(str(tmp_path_factory.mktemp("local")), cache, "launcher=local", "launcher.num_threads=1"))


def test_colocated_equals_local(cluster, cache, local_rows, tmp_path):
    # One worker process hosts actor and rollout; the in_process resharder runs inside it. Same seed,
    # same fp32 kernels on one thread, tensors moved by pickling only: the metrics are bit-equal.
    rows = comparable_rows(run_tiny(str(tmp_path), cache, "launcher=ray"))
    assert [row["step"] for row in rows] == [row["step"] for row in local_rows] == [0, 1, 2]
    assert rows == local_rows
    assert cpus_freed(4)  # the run's placement group and worker are gone


def test_split_with_safetensors_equals_local(cluster, cache, local_rows, tmp_path):
    # Rollout in its own process; weights travel as safetensors files. Bit-equal as above.
    rows = run_tiny(str(tmp_path), cache, "launcher=ray", *SPLIT)
    assert comparable_rows(rows) == local_rows
    assert all(row["perf/weight_sync_bytes"] > 0 for row in rows if row["step"] > 0)


def test_reward_on_its_own_pool_equals_local(cluster, cache, local_rows, tmp_path):
    # The reward function is a role like the engines: here it runs in its own Ray worker process
    # (as a reward model would on its own pool), called with the batch; same scores as in-process.
    rows = run_tiny(str(tmp_path), cache, "launcher=ray", "+launcher.resource_pools.rm=1", "+launcher.mapping.reward=rm")
    assert comparable_rows(rows) == local_rows


@pytest.mark.slow
def test_fsdp_world_size_2_colocated_matches_local(cluster, cache, local_rows, tmp_path):
    # Actor and rollout share a pool of 2 processes: each rank generates its half of the prompts
    # (seeded by prompt index, so the samples are the local ones) and trains on its half of the rows.
    rows = comparable_rows(run_tiny(str(tmp_path), cache, "launcher=ray", "+launcher.resource_pools.global=2"))
    assert_close_rows(rows, local_rows)


@pytest.mark.slow
def test_fsdp_world_size_2_matches_local(cluster, cache, local_rows, tmp_path):
    # Two actor ranks (gloo, one thread each) + rollout in its own process. Sharded gradients are
    # reduced across ranks in another order than one process sums them: equal to fp32 rounding.
    rows = comparable_rows(run_tiny(str(tmp_path), cache, "launcher=ray", "+launcher.resource_pools.global=2", *SPLIT))
    assert_close_rows(rows, local_rows)


def assert_close_rows(rows: list[dict], expected_rows: list[dict]) -> None:
    """Same steps and keys, values within fp32 reduction-order rounding."""
    assert len(rows) == len(expected_rows)
    for row, expected in zip(rows, expected_rows):
        assert row.keys() == expected.keys()
        for key, value in expected.items():
            assert math.isclose(row[key], value, rel_tol=1e-4, abs_tol=1e-6), (row["step"], key, row[key], value)
