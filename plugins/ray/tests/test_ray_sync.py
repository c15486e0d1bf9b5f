"""Weight sync in split placement (rollout on its own pool) on a real local Ray cluster:
``resharder=broadcast`` (a gloo sync group between the pools) and ``resharder=in_process`` (the
weights go through the Ray object store) give the local launcher's metrics; a failing receiver
surfaces as a WorkerError naming the rollout role and rank."""

from __future__ import annotations

import os

import pytest
from ray_test_helpers import assert_close_rows, cpus_freed, run_tiny, seconds_since_last_row
from rlloom_trainer.testing import comparable_rows

os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")
ray = pytest.importorskip("ray")

from rlloom_ray import WorkerError  # noqa: E402

SPLIT = ["launcher=ray", "+launcher.resource_pools.gen=1", "+launcher.mapping.rollout=gen"]


def assert_same_sync_bytes(rows: list[dict], local: list[dict]) -> None:
    # The local launcher's in_process resharder counts the same tensors: every step syncs them all.
    synced = [row["perf/weight_sync_bytes"] for row in rows if row["step"] > 0]
    assert synced and all(value > 0 for value in synced)
    assert synced == [row["perf/weight_sync_bytes"] for row in local if row["step"] > 0]


@pytest.mark.parametrize("resharder", ["broadcast", "in_process"])
def test_split_equals_local(ray_cluster, cache, local_rows, tmp_path, resharder):
    # Rollout in its own process. broadcast: train rank 0 broadcasts the exact bytes of every tensor
    # over a gloo group of its own; in_process: rank 0's tensors are pickled into the object store
    # and loaded by the rollout process. Either way the rollout gets bit-identical weights, and the
    # same seed and fp32 kernels on one thread give bit-equal metrics.
    rows = run_tiny(str(tmp_path), cache, *SPLIT, f"resharder={resharder}")
    assert comparable_rows(rows) == comparable_rows(local_rows)
    assert_same_sync_bytes(rows, local_rows)
    assert cpus_freed(4)


def test_a_failing_receiver_names_the_rollout_role_and_rank(ray_cluster, cache, tmp_path, monkeypatch):
    monkeypatch.setenv("RLLOOM_RAY_FAULT", "resharder:receive:2:raise")  # the sync after step 1
    with pytest.raises(WorkerError) as caught:
        run_tiny(str(tmp_path), cache, *SPLIT, "resharder=broadcast", steps=3)
    assert (caught.value.role, caught.value.rank, caught.value.method) == ("rollout", 0, "sync_receive")
    assert "RLLOOM_RAY_FAULT: injected failure in resharder.receive call 2" in str(caught.value)
    assert seconds_since_last_row(str(tmp_path)) < 60  # the stuck sender is killed, not waited for
    assert cpus_freed(4)


@pytest.mark.slow
def test_fsdp_world_size_2_with_broadcast_matches_local(ray_cluster, cache, local_rows, tmp_path):
    # Two actor ranks (gloo, one thread each): both gather the full weights, rank 0 broadcasts them
    # to the rollout pool. Sharded gradients are reduced in another order than one process sums
    # them: equal to fp32 rounding.
    rows = run_tiny(str(tmp_path), cache, *SPLIT, "+launcher.resource_pools.global=2", "resharder=broadcast")
    assert_close_rows(comparable_rows(rows), comparable_rows(local_rows))
    assert_same_sync_bytes(rows, local_rows)
    assert cpus_freed(4)


@pytest.mark.slow
@pytest.mark.parametrize("placement", [
    [*SPLIT, "trainer.async_mode=fully_async", "trainer.max_staleness=0"],
    ["launcher=ray"],
], ids=["own_pool_fully_async", "colocated"])
def test_lora_adapter_sync_under_ray(ray_cluster, cache, tmp_path, placement):
    # resharder.lora_sync=adapter into vLLM. On the rollout's own pool, generating ahead (fully_async; max_staleness
    # 0 keeps each batch on the trainer's weights, so the log-probs compare): train rank 0 puts W0 and the adapter
    # files in the object store once, then the adapter files alone, and the rollout worker writes and loads its
    # own copy. Colocated: the worker holding both engines writes the folder and loads it itself. Slow (vLLM starts
    # in a Ray worker): the runs of adapter sync under Ray. (Measured once, own pool: rollout vs trainer
    # 0.9-1.7e-9, KL to the base 0.12-0.14 after the first update.)
    rows = run_tiny(str(tmp_path), cache, *placement, "train_engine.lora.rank=4", "train_engine.lora.alpha=16",
                    "train_engine.lr=5e-2", "model.hidden_size=256", "model.intermediate_size=512", "rollout=vllm",
                    "rollout.max_lora_rank=8", "resharder.lora_sync=adapter", "algorithm.use_kl_loss=true", steps=3)
    trained = [row for row in rows if row["step"] > 0]
    assert len(trained) == 3
    for row in trained:
        assert row["training/rollout_probs_diff_mean"] < 1e-3, row["step"]  # vLLM with the adapter = the actor
    assert min(row["actor/kl_loss"] for row in trained[1:]) > 1e-2  # ... whose policy has left the base's
    first, *later = [row["perf/weight_sync_bytes"] for row in trained]
    assert later and len(set(later)) == 1
    assert later[0] <= 0.05 * (first - later[0])  # the adapters alone: at most 5 % of a merged sync (W0's bytes)
    assert cpus_freed(4)
