"""``trainer.async_mode`` under ``launcher=ray``: the rollout on a pool of its own generates the next batch
while the actor's pool trains, each batch stamped with the weights that generated it."""

from __future__ import annotations

import json
import os

import pytest
from ray_test_helpers import run_tiny

os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")
pytest.importorskip("ray")

OWN_POOL = ["launcher=ray", "+launcher.resource_pools.gen=1", "+launcher.mapping.rollout=gen"]


@pytest.mark.slow
@pytest.mark.parametrize("mode, ages", [("one_step_off", [0, 1, 1]), ("fully_async", [0, 1, 2])])
def test_the_rollout_pool_generates_ahead_within_the_bound(ray_cluster, cache, tmp_path, mode, ages):
    rows = run_tiny(str(tmp_path), cache, *OWN_POOL, f"trainer.async_mode={mode}", "trainer.max_staleness=2",
                    "trainer.dump_rollouts=32", steps=3)
    trained = [row for row in rows if row["step"] > 0]
    assert [row["async/staleness/max"] for row in trained] == ages
    for step in (1, 2, 3):
        with open(os.path.join(tmp_path, "rollouts", f"step_{step}.jsonl"), encoding="utf-8") as handle:
            dumped = [json.loads(line) for line in handle]
        assert {step - 1 - row["weight_version"] for row in dumped} == {ages[step - 1]}
        assert {row["uid"].split("-")[0] for row in dumped} == {f"draw{step}"}


@pytest.mark.slow
def test_streamed_groups_come_back_from_the_rollout_pool(ray_cluster, cache, tmp_path):
    """``trainer.stream_groups=true``, fully_async K=1: the rollout pool's worker streams each group back as it
    finishes (a Ray streaming generator). Step 1 trains its own draw; every step 4 groups of 8 samples, none
    older than K; no prompt trained twice."""
    rows = run_tiny(str(tmp_path), cache, *OWN_POOL, "trainer.async_mode=fully_async", "trainer.max_staleness=1",
                    "trainer.stream_groups=true", "trainer.dump_rollouts=32", steps=3)
    trained = [row for row in rows if row["step"] > 0]
    assert len(trained) == 3 and all(row["async/staleness/max"] <= 1 for row in trained)
    uids = []
    for step in (1, 2, 3):
        with open(os.path.join(tmp_path, "rollouts", f"step_{step}.jsonl"), encoding="utf-8") as handle:
            dumped = [json.loads(line) for line in handle]
        assert len(dumped) == 32 and all(step - 1 - row["weight_version"] <= 1 for row in dumped)
        uids += sorted({row["uid"] for row in dumped})
    assert uids[:4] == [f"draw1-{i}" for i in range(4)] and len(set(uids)) == 12


@pytest.mark.slow
def test_a_streamed_job_that_raises_names_the_worker_and_the_error(ray_cluster, cache, tmp_path, monkeypatch):
    from rlloom_ray import WorkerError

    monkeypatch.setenv("RLLOOM_RAY_FAULT", "rollout:stream_groups:2:raise")
    with pytest.raises(WorkerError, match=r"role 'rollout' rank 0 raised during stream_groups\(\)") as caught:
        run_tiny(str(tmp_path), cache, *OWN_POOL, "trainer.async_mode=fully_async", "trainer.stream_groups=true",
                 steps=3)
    assert "RLLOOM_RAY_FAULT: injected failure in rollout.stream_groups call 2" in str(caught.value)


@pytest.mark.slow
def test_partial_rollouts_on_the_rollout_pool_resume_rows_a_weight_load_interrupted(ray_cluster, cache, tmp_path):
    """``trainer.partial_rollout=true``, fully_async K=2, 64-token responses: the weight load of a sync runs in the
    rollout worker's own concurrency group while a job generates; the job's rows are withdrawn, the weights swapped,
    the rows resumed. Every trained sample within K; a resumed one's newest version above its oldest and never
    newer than the trainer's; some step counts interrupted and resumed rows."""
    rows = run_tiny(str(tmp_path), cache, *OWN_POOL, "trainer.async_mode=fully_async", "trainer.max_staleness=2",
                    "trainer.partial_rollout=true", "sampling.max_new_tokens=64", "sampling.ignore_eos=true",
                    "trainer.dump_rollouts=32", steps=4)
    trained = [row for row in rows if row["step"] > 0]
    for step, row in enumerate(trained, start=1):
        with open(os.path.join(tmp_path, "rollouts", f"step_{step}.jsonl"), encoding="utf-8") as handle:
            dumped = [json.loads(line) for line in handle]
        assert all(0 <= step - 1 - sample["weight_version"] <= 2 for sample in dumped)
        resumed = [sample for sample in dumped if (sample["weight_version_max"] or 0) > sample["weight_version"]]
        assert row.get("async/interrupted", 0.0) >= len(resumed)
        assert all(sample["weight_version_max"] <= step - 1 for sample in resumed)
    assert any(row["async/interrupted"] > 0 and row["async/resumed"] > 0 for row in trained)
