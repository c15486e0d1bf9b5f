"""``trainer.async_mode`` end to end on the tiny model (docs/async.md): the trajectories each mode trains on,
the staleness bound read from the versions stamped on the trained samples, learning with rollout
correction on, a SIGKILLed fully async run resumed, and the configs an async mode refuses."""

from __future__ import annotations

import json
import os

import pytest
from lifecycle_helpers import run, run_env, train_command
from rlloom.cli import main
from rlloom_trainer.testing import metric_rows, train_tiny, training_rows

ROWS = 32  # preset=tiny: 4 prompts x 8 samples, every one dumped
DUMP = f"trainer.dump_rollouts={ROWS}"
# Decoupled PPO (AReaL): the proximal policy's log-probs recomputed, tokens weighted by
# pi_prox / pi_behav, masked above 5
DECOUPLED = ["algorithm.rollout_is=token", "algorithm.rollout_is_mode=mask", "algorithm.rollout_is_threshold=5",
             "algorithm.rollout_is_threshold_lower=0"]
# Partial rollouts where weight updates land mid-generation on any CPU and load: 64-token responses decoded 2 rows at
# a time (rollout.max_batch_rows), so that generating a job outlasts a train step and the generator is never idle.
PARTIAL = ["trainer.partial_rollout=true", "sampling.max_new_tokens=64", "sampling.ignore_eos=true",
           "rollout.max_batch_rows=2"]
RAY_ROLLOUT_POOL = ["+launcher.mapping.rollout=gen", "+launcher.resource_pools.gen=1"]
STREAMED = ["trainer.stream_groups=true", "trainer.partial_rollout=true", "trainer.stale_policy=regenerate"]


def dumped(run_dir: str, step: int) -> list[dict]:
    with open(os.path.join(run_dir, "rollouts", f"step_{step}.jsonl"), encoding="utf-8") as handle:
        return [json.loads(line) for line in handle]


@pytest.mark.slow
def test_fully_async_without_staleness_trains_on_the_trajectories_of_sync(tmp_path):
    """Batch by batch and streamed (K = 0 admits the next prompts after each update: a step's groups are its
    own prompts, in their order)."""
    # One torch thread for the sync run; two for the async ones, split one per process: the same kernels.
    common = ["trainer.total_steps=3", "trainer.trackers=[jsonl]", DUMP]
    train_tiny(tmp_path / "sync", *common, "launcher.num_threads=1")
    for name, streamed in (("async", "false"), ("streamed", "true")):
        train_tiny(tmp_path / name, *common, "launcher.num_threads=2", "trainer.async_mode=fully_async",
                   "trainer.max_staleness=0", f"trainer.stream_groups={streamed}")
        for step in (1, 2, 3):
            assert dumped(str(tmp_path / name), step) == dumped(str(tmp_path / "sync"), step)


@pytest.mark.slow
@pytest.mark.parametrize("mode, staleness, extra", [
    ("one_step_off", 1, []),
    # partial rollouts, generating long enough for weight updates to land mid-generation (PARTIAL)
    ("fully_async", 2, PARTIAL),
])
def test_no_trained_sample_is_older_than_the_bound(tmp_path, mode, staleness, extra):
    rows = train_tiny(tmp_path, "trainer.total_steps=6", "trainer.trackers=[jsonl]", DUMP, "launcher.num_threads=2",
                      f"trainer.async_mode={mode}", f"trainer.max_staleness={staleness}", *extra)
    dumps = {step: dumped(str(tmp_path), step) for step in range(1, 7)}
    ages = {step: {step - 1 - row["weight_version"] for row in dumps[step]} for step in dumps}
    assert all(0 <= age <= staleness for step in ages for age in ages[step]), ages
    oldest = max(max(found) for found in ages.values())  # generation did run ahead (partial: resumed ones freshen)
    assert oldest == staleness if not extra else 1 <= oldest <= staleness
    for step, row in enumerate(training_rows(rows), start=1):
        assert row["async/staleness/max"] == max(ages[step])
        assert 0.0 <= row["async/trainer_idle_frac"] <= 1.0 and 0.0 <= row["async/generator_idle_frac"] <= 1.0
        resumed = [sample for sample in dumps[step] if (sample["weight_version_max"] or 0) > sample["weight_version"]]
        assert row.get("async/interrupted", 0.0) >= len(resumed)
        assert all(sample["weight_version_max"] <= step - 1 for sample in resumed)  # never newer than the trainer
    for step in range(1, 7):
        assert {row["uid"].split("-")[0] for row in dumped(str(tmp_path), step)} == {f"draw{step}"}
    # the epoch of the trained prompts, as sync logs it (digits' 20 training prompts: 5 draws of 4), not of
    # the prompts drawn ahead (fully_async K=2 has drawn step 6's by step 3)
    assert [row["training/epoch"] for row in training_rows(rows)] == [0, 0, 0, 0, 0, 1]
    if extra:  # some generation was interrupted by a weight update and resumed
        assert any(row["async/interrupted"] > 0 and row["async/resumed"] > 0 for row in training_rows(rows))


@pytest.mark.slow
@pytest.mark.parametrize("mode", ["one_step_off", "fully_async"])
def test_tiny_grpo_learns_with_rollout_correction_in_each_async_mode(tmp_path, mode):
    rows = training_rows(train_tiny(tmp_path, "trainer.trackers=[jsonl]", "launcher.num_threads=2",
                                    f"trainer.async_mode={mode}", *DECOUPLED))
    assert len(rows) == 20
    first = sum(row["critic/score/mean"] for row in rows[:3]) / 3
    last = sum(row["critic/score/mean"] for row in rows[-3:]) / 3
    assert last > first + 0.4, (first, last)
    assert all("rollout_corr/is_weight_mean" in row for row in rows)


@pytest.mark.slow
@pytest.mark.parametrize("streamed", [False, True], ids=["batches", "streamed"])
def test_a_sigkilled_fully_async_run_resumes_without_losing_or_repeating_a_batch(tmp_path, streamed):
    """Killed inside the save of global_step_4 (the checkpoint seam, so the kill's place does not depend on
    timing; the run resumes from global_step_2): the resumed run regenerates what was not trained from the
    checkpoint's data position, by batches so that each step trains its own draw once; streamed (with partial
    rollouts, stale groups regenerated: groups of any draw, the checkpoint recording the prompts trained past
    its data position) so that every prompt of draws 1 to 6 is trained once in all."""
    run_dir, cache = str(tmp_path / "run"), str(tmp_path / "cache")
    streaming = STREAMED if streamed else []
    command = train_command(run_dir, cache, "trainer.async_mode=fully_async", "trainer.max_staleness=2",
                            "trainer.trackers=[jsonl]", DUMP, *streaming)
    assert run(command, run_env(RLLOOM_TEST_KILL_AT="during_save:4")).returncode == -9
    result = run(command)
    assert result.returncode == 0, result.stderr[-3000:]
    assert f"resumed from {run_dir}/checkpoints/global_step_2 (step 2)" in result.stderr
    assert [row["step"] for row in metric_rows(run_dir)] == [0, 1, 2, 3, 4, 5, 6]
    trained = []
    for step in range(1, 7):
        rows = dumped(run_dir, step)
        trained += [row["uid"] for row in rows]
        own_draw = sorted(f"draw{step}-{i}" for i in range(4) for _ in range(8))
        assert streamed or sorted(row["uid"] for row in rows) == own_draw
        assert all(step - 1 - row["weight_version"] <= 2 for row in rows)
    assert sorted(trained) == sorted(f"draw{draw}-{i}" for draw in range(1, 7) for i in range(4) for _ in range(8))
    assert {row["weight_version"] for row in dumped(run_dir, 3)} == {2}  # regenerated by the checkpoint's weights


REFUSED = [
    (["trainer.async_mode=later"], "trainer.async_mode=later: must be one of sync, one_step_off, fully_async"),
    (["trainer.async_mode=fully_async", "trainer.max_staleness=-1"], "trainer.max_staleness=-1: must be >= 0"),
    (["trainer.async_mode=one_step_off", "resharder=shared"], "trainer.async_mode=one_step_off: resharder=shared"),
    (["trainer.async_mode=fully_async", "trainer.offload_train_engines=true"], "trainer.offload_train_engines=true"),
    (["trainer.async_mode=fully_async", "agent=tools"], "agent=tools needs trainer.async_mode=sync"),
    (["trainer.async_mode=one_step_off", "launcher=ray"], "launcher.mapping.rollout=global is the actor's pool"),
    (["trainer.async_mode=one_step_off", "trainer.partial_rollout=true"],
     "trainer.partial_rollout=true needs trainer.async_mode=fully_async and launcher=local or ray"),
    (["trainer.partial_rollout=true"], "(not trainer.async_mode=sync, launcher=local)"),
    (["trainer.async_mode=fully_async", "launcher=ray", "trainer.partial_rollout=true", *RAY_ROLLOUT_POOL,
      "resharder=safetensors"], "resharder=safetensors is not resharder=in_process"),
    (["trainer.async_mode=one_step_off", "trainer.stream_groups=true"],
     "trainer.stream_groups=true needs trainer.async_mode=fully_async and launcher=local or ray"),
    (["trainer.stale_policy=keep"], "trainer.stale_policy=keep: must be one of drop, regenerate"),
]


@pytest.mark.parametrize("overrides, named", REFUSED, ids=[" ".join(case[0]) for case in REFUSED])
def test_an_async_mode_the_config_cannot_run_is_exit_2_naming_the_key(overrides, named, tmp_path, capsys):
    cache = tmp_path / "models"
    cache.mkdir()
    status = main(["train", "preset=tiny", f"model.cache_dir={cache}", f"trainer.run_dir={tmp_path / 'run'}",
                   *overrides])
    err = capsys.readouterr().err
    assert status == 2, err
    assert named in err and "Traceback" not in err, err
    assert os.listdir(cache) == [] and not os.path.exists(tmp_path / "run")
