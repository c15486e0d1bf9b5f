"""launcher=ray on a GPU: actor and rollout colocated in one worker that reserves the GPU
(``launcher.gpus_per_worker=1``), the rollout asleep while the actor trains. Needs a CUDA GPU."""

from __future__ import annotations

import os

import pytest
from ray_test_helpers import run_tiny

os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")
ray = pytest.importorskip("ray")

pytestmark = pytest.mark.cuda("Ray worker reserving one GPU, NCCL pool group")


def test_colocated_on_one_gpu_trains_there(ray_cluster, cache, tmp_path):
    rows = run_tiny(str(tmp_path), cache, "launcher=ray", "launcher.gpus_per_worker=1", steps=3)
    steps = [row for row in rows if row["step"] > 0]
    # The actor reports CUDA memory only when it runs on the GPU; sleeping the HF rollout between
    # phases moves its weights off the GPU, so the peak stays below two model copies plus work.
    assert all(row["perf/max_memory_allocated_gb"] > 0 for row in steps)
    assert all(row["perf/weight_sync_bytes"] > 0 for row in steps)
    assert steps[-1]["critic/score/mean"] >= steps[0]["critic/score/mean"]
