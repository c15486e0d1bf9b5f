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
POOL_OF_TWO = ["launcher=ray", "+launcher.resource_pools.gen=2", "+launcher.mapping.rollout=gen"]


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
    """``trainer.stream_groups=true``, fully_async K=1, a rollout pool of 2 workers: each job's prompts are split
    over them (2 each), each streams its groups back as they finish (a Ray streaming generator), the trainer reads
    the merged streams. Step 1 trains its own draw; every step 4 groups of 8 samples, none older than K; every
    prompt of draws 1 to 3 trained once (so both workers' groups came: each job's prompts 2 and 3 are rank 1's)."""
    rows = run_tiny(str(tmp_path), cache, *POOL_OF_TWO, "trainer.async_mode=fully_async", "trainer.max_staleness=1",
                    "trainer.stream_groups=true", "trainer.dump_rollouts=32", steps=3)
    trained = [row for row in rows if row["step"] > 0]
    assert len(trained) == 3 and all(row["async/staleness/max"] <= 1 for row in trained)
    uids = []
    for step in (1, 2, 3):
        with open(os.path.join(tmp_path, "rollouts", f"step_{step}.jsonl"), encoding="utf-8") as handle:
            dumped = [json.loads(line) for line in handle]
        assert len(dumped) == 32 and all(step - 1 - row["weight_version"] <= 1 for row in dumped)
        uids += sorted({row["uid"] for row in dumped})
    assert uids[:4] == [f"draw1-{i}" for i in range(4)] and len(uids) == 12
    assert set(uids) == {f"draw{k}-{i}" for k in (1, 2, 3) for i in range(4)}


@pytest.mark.slow
def test_a_streamed_job_whose_worker_dies_names_the_worker(ray_cluster, cache, tmp_path, monkeypatch):
    """Rank 1 of a rollout pool of 2 exits in its first streamed job (the first step waits for its groups before
    any sync): a WorkerError naming the role, the rank and the call (a job that raises: ``test_ray_dispatch.py``)."""
    from rlloom_ray import WorkerError

    monkeypatch.setenv("RLLOOM_RAY_FAULT", "rollout:stream_groups:1:exit:1")
    with pytest.raises(WorkerError, match=r"role 'rollout' rank 1 died during stream_groups\(\)"):
        run_tiny(str(tmp_path), cache, *POOL_OF_TWO, "trainer.async_mode=fully_async", "trainer.stream_groups=true",
                 steps=3)


@pytest.mark.slow
@pytest.mark.parametrize("streamed", [False, True])
def test_partial_rollouts_on_the_rollout_pool_resume_rows_a_weight_load_interrupted(ray_cluster, cache, tmp_path,
                                                                                    streamed):
    """``trainer.partial_rollout=true``, fully_async K=2, 64-token responses, a rollout pool of 2 workers (streamed:
    with ``trainer.stream_groups=true``): each sync's weight load runs in every rollout worker's own concurrency
    group while its piece of a job generates; each worker's rows are withdrawn, the weights swapped, the rows
    resumed. Every trained sample within K; a resumed one's newest version above its oldest and never newer than
    the trainer's; some step counts interrupted and resumed rows; not streamed, both workers' rows (prompts 0-1 of a
    draw are rank 0's, 2-3 rank 1's) were resumed. Each worker decodes 2 rows at a time (``rollout.max_batch_rows``)
    so that generating a job outlasts a train step on any CPU: the generator is never idle when a load comes."""
    rows = run_tiny(str(tmp_path), cache, *POOL_OF_TWO, "trainer.async_mode=fully_async", "trainer.max_staleness=2",
                    "trainer.partial_rollout=true", "sampling.max_new_tokens=64", "sampling.ignore_eos=true",
                    "rollout.max_batch_rows=2", f"trainer.stream_groups={str(streamed).lower()}",
                    "trainer.dump_rollouts=32", steps=4)
    trained = [row for row in rows if row["step"] > 0]
    ranks = set()
    for step, row in enumerate(trained, start=1):
        with open(os.path.join(tmp_path, "rollouts", f"step_{step}.jsonl"), encoding="utf-8") as handle:
            dumped = [json.loads(line) for line in handle]
        assert all(0 <= step - 1 - sample["weight_version"] <= 2 for sample in dumped)
        resumed = [sample for sample in dumped if (sample["weight_version_max"] or 0) > sample["weight_version"]]
        assert row.get("async/interrupted", 0.0) >= len(resumed)
        assert all(sample["weight_version_max"] <= step - 1 for sample in resumed)
        ranks |= {int(sample["uid"].split("-")[1]) // 2 for sample in resumed}
    assert any(row["async/interrupted"] > 0 and row["async/resumed"] > 0 for row in trained)
    assert streamed or ranks == {0, 1}
