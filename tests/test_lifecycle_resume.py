"""Kill a real ``rlloom train`` with SIGKILL (mid-step, mid-save, between the rename and the ``latest``
pointer), or damage its last checkpoint, re-run the same command, and compare with an uninterrupted run:
metrics.jsonl (all but the time/memory measurements) and the final weights must be bitwise equal on CPU
with one thread."""

from __future__ import annotations

import json
import os
import shutil

import pytest
import torch
from lifecycle_helpers import kill_when_logged, metric_rows, run, run_env, train_command
from rlloom_trainer import testing
from rlloom_trainer.checkpoint import damage
from rlloom_trainer.testing import RESUME_MARKER
from safetensors.torch import load_file

TRACKERS = "trainer.trackers=[jsonl,tensorboard,mlflow]"


@pytest.fixture(scope="module")
def cache_dir(tmp_path_factory) -> str:
    return str(tmp_path_factory.mktemp("lifecycle-cache"))


@pytest.fixture(scope="module")
def reference(tmp_path_factory, cache_dir) -> str:
    """An uninterrupted run."""
    run_dir = str(tmp_path_factory.mktemp("reference"))
    result = run(train_command(run_dir, cache_dir, TRACKERS))
    assert result.returncode == 0, result.stderr[-3000:]
    return run_dir


def assert_same_run(resumed: str, reference: str, resumed_from: int | None) -> None:
    """The same records and weights as the uninterrupted run; the first row after a resume (and only
    it) says which step the run resumed from."""
    marked = [(row["step"], row[RESUME_MARKER]) for row in testing.metric_rows(resumed) if RESUME_MARKER in row]
    assert marked == ([] if resumed_from is None else [(resumed_from + 1, resumed_from)])
    assert metric_rows(resumed) == metric_rows(reference)
    ours = load_file(os.path.join(resumed, "final_model", "model.safetensors"))
    theirs = load_file(os.path.join(reference, "final_model", "model.safetensors"))
    assert ours.keys() == theirs.keys()
    for name in theirs:
        assert torch.equal(ours[name], theirs[name]), name
    for step in range(1, 7):
        name = os.path.join("rollouts", f"step_{step}.jsonl")
        with open(os.path.join(resumed, name)) as a, open(os.path.join(reference, name)) as b:
            assert a.read() == b.read(), name


def test_reference_run_logs_every_step_once(reference):
    rows = metric_rows(reference)
    assert [row["step"] for row in rows] == [0, 1, 2, 3, 4, 5, 6]
    assert sorted(os.listdir(os.path.join(reference, "checkpoints"))) == [
        "global_step_2", "global_step_4", "global_step_6", "latest"]
    with open(os.path.join(reference, "checkpoints", "latest")) as handle:
        assert handle.read().strip() == "global_step_6"


@pytest.mark.slow
@pytest.mark.parametrize("logged_step", [1, 3])
def test_sigkill_mid_step_then_resume_equals_uninterrupted(tmp_path, cache_dir, reference, logged_step):
    """Killed while inside step 2 (before any checkpoint: a fresh restart) or step 4 (resumes from
    global_step_2, dropping the killed process's rows of step 3)."""
    run_dir = str(tmp_path / "run")
    command = train_command(run_dir, cache_dir, TRACKERS)
    assert kill_when_logged(command, run_dir, logged_step) == -9
    assert not os.path.exists(os.path.join(run_dir, "final_model"))
    result = run(command)
    assert result.returncode == 0, result.stderr[-3000:]
    if logged_step == 1:  # no checkpoint yet: a fresh start, which says what it dropped (validation and step 1)
        assert_same_run(run_dir, reference, None)
        assert (f"rlloom: no checkpoint in {run_dir}: starting over; dropped what the interrupted run logged after "
                f"it: 2 rows (steps 0-1) of metrics.jsonl") in result.stderr
    else:
        assert_same_run(run_dir, reference, 2)
        assert (f"rlloom: resumed from {run_dir}/checkpoints/global_step_2 (step 2); dropped what the interrupted "
                f"run logged after it: 1 row (step 3) of metrics.jsonl") in result.stderr
    if logged_step == 3:
        from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

        events = EventAccumulator(os.path.join(run_dir, "tensorboard"))
        events.Reload()
        scalars = events.Scalars("critic/score/mean")
        expected = [row["critic/score/mean"] for row in metric_rows(reference) if row["step"] > 0]
        assert [e.step for e in scalars] == [1, 2, 3, 4, 5, 6]  # step 3 of the killed process purged
        assert [e.value for e in scalars] == pytest.approx(expected, rel=1e-6)


@pytest.mark.slow
@pytest.mark.parametrize("point", ["during_save", "before_latest"])
def test_sigkill_mid_save_then_resume_equals_uninterrupted(tmp_path, cache_dir, reference, point):
    """Killed inside the save of global_step_4: with its files written but no manifest (the .tmp
    folder must be ignored), or renamed but before the ``latest`` pointer moved."""
    run_dir = str(tmp_path / "run")
    command = train_command(run_dir, cache_dir, TRACKERS)
    killed = run(command, run_env(RLLOOM_TEST_KILL_AT=f"{point}:4"))
    assert killed.returncode == -9
    checkpoints = os.path.join(run_dir, "checkpoints")
    with open(os.path.join(checkpoints, "latest")) as handle:
        assert handle.read().strip() == "global_step_2"
    leftover = "global_step_4.tmp" if point == "during_save" else "global_step_4"
    assert leftover in os.listdir(checkpoints)
    result = run(command)
    assert result.returncode == 0, result.stderr[-3000:]
    assert "global_step_4.tmp" not in os.listdir(checkpoints)
    step = 2 if point == "during_save" else 4  # a complete global_step_4 is found without the pointer
    assert_same_run(run_dir, reference, step)
    assert f"rlloom: resumed from {os.path.join(checkpoints, f'global_step_{step}')} (step {step})" in result.stderr


def test_incompatible_config_change_is_refused_before_resuming(tmp_path, cache_dir, reference):
    run_dir = str(tmp_path / "copy")
    shutil.copytree(reference, run_dir)
    result = run(train_command(run_dir, cache_dir, "algorithm.n=4", "trainer.train_batch_size=2"))
    assert result.returncode == 2
    message = result.stderr
    assert message.startswith("rlloom: error: trainer.resume=auto: the checkpoint ")
    assert "algorithm.n: 8 -> 4" in message and "trainer.train_batch_size: 4 -> 2" in message
    assert "Traceback" not in message


def test_resume_never_refuses_a_run_dir_with_checkpoints(cache_dir, reference):
    import rlloom_trainer
    from lifecycle_helpers import SCHEDULE
    from rlloom.config import ConfigError

    overrides = [*SCHEDULE, f"trainer.run_dir={reference}", f"model.cache_dir={cache_dir}", "trainer.resume=never"]
    with pytest.raises(ConfigError, match=r"trainer.resume=never but trainer.run_dir=.* already holds checkpoints "
                                          r"\(.*global_step_6\)"):
        rlloom_trainer.train(overrides)


def test_a_longer_schedule_continues_from_the_last_checkpoint(tmp_path, cache_dir, reference):
    """total_steps may change across a resume: 6 → 7 runs exactly one more step."""
    run_dir = str(tmp_path / "copy")
    shutil.copytree(reference, run_dir)
    result = run(train_command(run_dir, cache_dir, "trainer.total_steps=7", "trainer.trackers=[jsonl]"))
    assert result.returncode == 0, result.stderr[-3000:]
    rows = metric_rows(run_dir)
    assert [row["step"] for row in rows] == [0, 1, 2, 3, 4, 5, 6, 7]
    assert rows[:7] == metric_rows(reference)


def flip_8_bytes(path: str, offset: int) -> None:
    with open(path, "r+b") as handle:
        handle.seek(offset)
        data = handle.read(8)
        handle.seek(offset)
        handle.write(bytes(byte ^ 0xFF for byte in data))


def unfinished_copy(reference: str, tmp_path) -> str:
    """The reference run, killed (as it were) after its last checkpoint, before final_model/."""
    run_dir = str(tmp_path / "copy")
    shutil.copytree(reference, run_dir)
    shutil.rmtree(os.path.join(run_dir, "final_model"))
    os.remove(os.path.join(run_dir, "final_metrics.json"))
    return run_dir


SHARD = "actor/__0_0.distcp"  # the tensor file of the tiny preset's FSDP checkpoint
DAMAGES = {
    "8 bytes flipped inside the tensor shard": (SHARD, lambda path: flip_8_bytes(path, os.path.getsize(path) // 2)),
    "the zip header of trainer_state.pt": ("trainer_state.pt", lambda path: flip_8_bytes(path, 0)),
    "the shard deleted": (SHARD, os.remove),
    "the shard truncated": (SHARD, lambda path: os.truncate(path, os.path.getsize(path) // 2)),
}


@pytest.mark.parametrize("kind", list(DAMAGES))
def test_a_damaged_checkpoint_is_skipped_naming_the_file_and_the_resume_equals_uninterrupted(
        tmp_path, cache_dir, reference, kind):
    run_dir = unfinished_copy(reference, tmp_path)
    checkpoints = os.path.join(run_dir, "checkpoints")
    rel, spoil = DAMAGES[kind]
    spoil(os.path.join(checkpoints, "global_step_6", rel))
    result = run(train_command(run_dir, cache_dir, TRACKERS))
    assert result.returncode == 0, result.stderr[-3000:]
    assert f"rlloom: skipping the damaged checkpoint {checkpoints}/global_step_6: {rel} " in result.stderr
    assert f"rlloom: resumed from {checkpoints}/global_step_4 (step 4)" in result.stderr
    assert "Traceback" not in result.stderr
    assert_same_run(run_dir, reference, 4)
    assert damage(os.path.join(checkpoints, "global_step_6")) is None  # written again by the resumed run
    assert "global_step_6.damaged" in os.listdir(checkpoints)


def test_bytes_flipped_anywhere_in_any_kind_of_checkpoint_file_are_found(reference, tmp_path):
    """Three offsets (first, middle, last 8 bytes) of three kinds of file: the tensor shard, the zip of
    trainer_state.pt and DCP's pickled .metadata."""
    checkpoint = str(tmp_path / "global_step_6")
    shutil.copytree(os.path.join(reference, "checkpoints", "global_step_6"), checkpoint)
    assert damage(checkpoint) is None
    for rel in (SHARD, "trainer_state.pt", "actor/.metadata"):
        path = os.path.join(checkpoint, rel)
        for offset in (0, os.path.getsize(path) // 2, os.path.getsize(path) - 8):
            flip_8_bytes(path, offset)
            assert damage(checkpoint) == f"{rel} does not match its sha256 checksum (its content changed after it " \
                                         f"was written)", (rel, offset)
            flip_8_bytes(path, offset)
            assert damage(checkpoint) is None


def test_eval_and_export_refuse_a_damaged_checkpoint_naming_the_file(reference, tmp_path):
    from lifecycle_helpers import RLLOOM

    run_dir = str(tmp_path / "copy")
    shutil.copytree(reference, run_dir)
    checkpoint = os.path.join(run_dir, "checkpoints", "global_step_6")
    flip_8_bytes(os.path.join(checkpoint, SHARD), 100)
    for command in ([str(RLLOOM), "export", checkpoint, "--out", str(tmp_path / "hf")],
                    [str(RLLOOM), "eval", run_dir]):
        result = run(command)
        assert result.returncode == 2, result.stderr[-3000:]
        assert result.stderr.startswith(f"rlloom: error: the checkpoint '{checkpoint}' is damaged: {SHARD} does not "
                                        f"match its sha256 checksum"), result.stderr[-3000:]
        assert "Traceback" not in result.stderr
    assert not os.path.exists(tmp_path / "hf")


def test_killed_after_its_final_checkpoint_the_run_finishes_its_end_also_from_checkpoints_without_checksums(
        tmp_path, cache_dir, reference):
    """Killed after the last checkpoint but before final_model/ and final_metrics.json, with checkpoints written
    before checkpoints carried checksums: the re-run resumes from the last one (saying once that they are
    checked by size only), writes both, with the last step's real metrics (not {}), and trains nothing more."""
    run_dir = unfinished_copy(reference, tmp_path)
    for step in (2, 4, 6):
        path = os.path.join(run_dir, "checkpoints", f"global_step_{step}", "manifest.json")
        with open(path) as handle:
            manifest = json.load(handle)
        manifest["files"] = {rel: entry["bytes"] for rel, entry in manifest["files"].items()}
        with open(path, "w") as handle:
            json.dump(manifest, handle)
    result = run(train_command(run_dir, cache_dir, TRACKERS))
    assert result.returncode == 0, result.stderr[-3000:]
    assert result.stderr.count("written before checkpoints carried checksums") == 1
    assert f"rlloom: resumed from {run_dir}/checkpoints/global_step_6 (step 6)" in result.stderr
    with open(os.path.join(run_dir, "final_metrics.json")) as ours, open(
            os.path.join(reference, "final_metrics.json")) as theirs:
        assert json.load(ours) == json.load(theirs) != {}
    assert metric_rows(run_dir) == metric_rows(reference)
    ours = load_file(os.path.join(run_dir, "final_model", "model.safetensors"))
    theirs = load_file(os.path.join(reference, "final_model", "model.safetensors"))
    assert ours.keys() == theirs.keys() and all(torch.equal(ours[name], theirs[name]) for name in theirs)

# ------------------------------------------------------------------ what the reference run wrote
def test_tensorboard_events_hold_the_metrics_of_every_step(reference):
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    events = EventAccumulator(os.path.join(reference, "tensorboard"))
    events.Reload()
    rows = metric_rows(reference)
    for name in ("critic/score/mean", "actor/pg_loss", "actor/grad_norm", "response_length/mean"):
        scalars = events.Scalars(name)
        assert [e.step for e in scalars] == [1, 2, 3, 4, 5, 6], name
        assert [e.value for e in scalars] == pytest.approx([row[name] for row in rows[1:]], rel=1e-6), name
    assert [e.step for e in events.Scalars("val-core/digits/acc/mean@2")] == [0, 3, 6]
    assert "timing_s/gen" in events.Tags()["scalars"]


def test_mlflow_store_holds_the_metrics_of_every_step(reference):
    os.environ.setdefault("MLFLOW_ALLOW_FILE_STORE", "true")
    from mlflow.tracking import MlflowClient
    from rlloom_trainer.trackers.mlflow import EXPERIMENT, store_uri

    client = MlflowClient(tracking_uri=store_uri(reference))
    (run_info,) = client.search_runs([client.get_experiment_by_name(EXPERIMENT).experiment_id])
    assert run_info.data.params["trainer.total_steps"] == "6"
    rows = metric_rows(reference)
    history = client.get_metric_history(run_info.info.run_id, "critic/score/mean")
    assert sorted(m.step for m in history) == [1, 2, 3, 4, 5, 6]
    by_step = {m.step: m.value for m in history}
    assert [by_step[s] for s in range(1, 7)] == pytest.approx([row["critic/score/mean"] for row in rows[1:]])
    val = client.get_metric_history(run_info.info.run_id, "val-core/digits/acc/mean_at_2")
    assert sorted(m.step for m in val) == [0, 3, 6]


def test_rollout_dumps_hold_rewards_and_grpo_advantages(reference):
    import json

    import numpy as np

    with open(os.path.join(reference, "rollouts", "step_5.jsonl")) as handle:
        rows = [json.loads(line) for line in handle]
    assert len(rows) == 8 and {row["uid"] for row in rows} == {"draw5-0"}  # one group of n=8
    for row in rows:
        text = row["response"]
        assert row["reward"] == pytest.approx(sum(c.isdigit() for c in text) / len(text) if text else 0.0)
        assert row["prompt"].startswith("Q: ")
    rewards = np.array([row["reward"] for row in rows], dtype=np.float64)
    expected = (rewards - rewards.mean()) / (rewards.std(ddof=1) + 1e-6)
    for row, advantage in zip(rows, expected):
        assert 1 <= len(row["advantages"]) <= 4  # one per response token (max_new_tokens=4)
        assert row["advantages"] == pytest.approx([advantage] * len(row["advantages"]), abs=1e-5)


def test_plot_writes_the_charts(reference, tmp_path):
    from lifecycle_helpers import RLLOOM

    result = run([str(RLLOOM), "plot", reference, "--out", str(tmp_path)])
    assert result.returncode == 0, result.stderr
    names = sorted(os.listdir(tmp_path))
    # no kl.png: the tiny preset trains without KL, whose metrics stay 0
    assert names == ["entropy.png", "response_length.png", "reward.png", "step_time.png", "val_accuracy.png"]
    assert result.stdout.split() == [str(tmp_path / name) for name in
                                     ("reward.png", "val_accuracy.png", "entropy.png", "response_length.png",
                                      "step_time.png")]
    for name in names:
        data = (tmp_path / name).read_bytes()
        assert data.startswith(b"\x89PNG\r\n\x1a\n") and len(data) > 10_000, name


def test_export_reloads_in_transformers_and_generates_like_the_trained_policy(reference, tmp_path):
    from lifecycle_helpers import RLLOOM
    from transformers import AutoModelForCausalLM

    out = tmp_path / "hf"
    result = run([str(RLLOOM), "export", os.path.join(reference, "checkpoints", "global_step_6"), "--out", str(out)])
    assert result.returncode == 0, result.stderr[-3000:]
    assert result.stdout.strip() == str(out)
    exported = AutoModelForCausalLM.from_pretrained(str(out), dtype=torch.float32).eval()
    trained = AutoModelForCausalLM.from_pretrained(os.path.join(reference, "final_model"), dtype=torch.float32).eval()
    for (name, ours), (_, theirs) in zip(exported.state_dict().items(), trained.state_dict().items()):
        assert torch.equal(ours, theirs), name
    ids = torch.tensor([[ord(c) for c in "Q: name a single digit\nA:"]])
    with torch.no_grad():
        assert torch.equal(exported(ids).logits, trained(ids).logits)
        ours = exported.generate(ids, max_new_tokens=6, do_sample=False)
        theirs = trained.generate(ids, max_new_tokens=6, do_sample=False)
    assert torch.equal(ours, theirs)
