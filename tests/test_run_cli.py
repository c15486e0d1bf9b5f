"""``rlloom train`` as a user runs it, as a real subprocess: a run named after its choices lands in
``runs/<run_name>`` and re-running the command resumes it (or says it has finished); the run's
``config.yaml`` names every choice and plugin version and, passed to ``--config``, trains the same run
again; a config file with command-line overrides; Ctrl-C and SIGTERM (real signals, the second in the run
the first one's printed command resumes); one run per run folder (a second ``rlloom train`` on a folder in
use is refused, a lock left by a killed run is not); ``rlloom --version``."""

from __future__ import annotations

import importlib.metadata
import json
import os
import re
import shlex
import shutil
import signal
import subprocess
import time
from pathlib import Path

import pytest
import rlloom
import yaml
from lifecycle_helpers import RLLOOM, run_env
from rlloom.config import ConfigError
from rlloom_trainer import testing
from rlloom_trainer.checkpoint import CheckpointManager
from rlloom_trainer.testing import default_sigint
from rlloom_trainer.config_files import compose_with_file
from rlloom_trainer.run_lock import LOCK_FILE, run_lock

REPO = Path(__file__).resolve().parents[1]
EXAMPLE = REPO / "examples" / "config_file" / "digits_tiny.yaml"
NAME = "grpo-digits-tiny"  # preset=tiny: algorithm=grpo data=digits model=tiny
RUN = os.path.join("runs", NAME)
SHORT = ["preset=tiny", "trainer.total_steps=4", "trainer.save_freq=2", "launcher.num_threads=1"]


def train(cwd: Path, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run([str(RLLOOM), "train", *args], cwd=cwd, env=run_env(), capture_output=True, text=True,
                          timeout=300)


def steps(run_dir: Path) -> list[int]:
    return [row["step"] for row in testing.metric_rows(run_dir)]


@pytest.fixture(scope="module")
def cache_dir(tmp_path_factory) -> str:
    return str(tmp_path_factory.mktemp("run-cli-cache"))


@pytest.fixture(scope="module")
def first_run(tmp_path_factory, cache_dir) -> tuple[Path, subprocess.CompletedProcess]:
    """``rlloom train preset=tiny …`` in an empty folder, without ``trainer.run_dir``."""
    cwd = tmp_path_factory.mktemp("cwd")
    result = train(cwd, *SHORT, f"model.cache_dir={cache_dir}")
    assert result.returncode == 0, result.stderr[-3000:]
    return cwd, result


def test_the_run_folder_is_named_after_the_choices_and_records_them(first_run):
    cwd, _ = first_run
    assert os.listdir(cwd / "runs") == [NAME]
    assert steps(cwd / RUN) == [0, 1, 2, 3, 4]
    with open(cwd / RUN / "config.yaml") as handle:
        record = yaml.safe_load(handle)
    origins = {"algorithm": "rlloom-grpo", "rollout": "rlloom-hf", "train_engine": "rlloom-fsdp",
               "resharder": "rlloom-enginekit", "reward": "rlloom-tasks", "cost": "rlloom", "data": "rlloom-tasks",
               "model": "rlloom-models", "launcher": "rlloom-trainer", "trainer": "rlloom", "agent": "rlloom-agentkit"}
    assert record["choices"] == {"algorithm": "grpo", "rollout": "hf", "train_engine": "fsdp",
                                 "resharder": "in_process", "reward": "digit_fraction", "cost": "none",
                                 "data": "digits", "model": "tiny", "launcher": "local", "trainer": "default",
                                 "agent": "single_turn"}
    provenance = record["provenance"]
    assert provenance["plugins"] == {group: {"distribution": dist, "version": importlib.metadata.version(dist)}
                                     for group, dist in origins.items()}
    trainer_version = importlib.metadata.version("rlloom-trainer")
    assert provenance["trackers"] == {name: {"distribution": "rlloom-trainer", "version": trainer_version}
                                      for name in ("console", "jsonl")}
    assert provenance["rlloom"] == rlloom.__version__
    head = subprocess.run(["git", "-C", str(REPO), "rev-parse", "HEAD"], capture_output=True, text=True)
    assert provenance["git_commit"] == (head.stdout.strip() if head.returncode == 0 else None)
    assert (record["trainer"]["run_name"], record["trainer"]["run_dir"]) == (NAME, None)
    with open(cwd / RUN / "checkpoints" / "global_step_4" / "config.yaml") as handle:
        assert yaml.safe_load(handle) == record


def test_the_recorded_config_trains_the_same_run_again(first_run):
    cwd, _ = first_run
    result = train(cwd, "--config", os.path.join(RUN, "config.yaml"), "trainer.run_name=again")
    assert result.returncode == 0, result.stderr[-3000:]
    again = testing.comparable_rows(testing.metric_rows(cwd / "runs" / "again"))
    assert [row["step"] for row in again] == [0, 1, 2, 3, 4]
    assert again == testing.comparable_rows(testing.metric_rows(cwd / RUN))


def test_rerunning_the_command_resumes_the_run_or_says_it_finished(first_run, cache_dir, tmp_path):
    cwd, first = first_run
    shutil.copytree(cwd / RUN, tmp_path / RUN)
    command = [*SHORT, f"model.cache_dir={cache_dir}"]
    with open(tmp_path / RUN / "metrics.jsonl") as handle:
        before = handle.read()

    finished = train(tmp_path, *command)
    assert finished.returncode == 0, finished.stderr[-3000:]
    assert finished.stderr.splitlines() == [
        f"rlloom: run {NAME} already finished 4/4 steps in {RUN}; to train longer raise trainer.total_steps, to "
        f"start over pass trainer.run_name=<new> or another trainer.run_dir"]  # nothing was built or logged
    assert json.loads(finished.stdout) == json.loads(first.stdout)
    with open(tmp_path / RUN / "metrics.jsonl") as handle:
        assert handle.read() == before

    longer = train(tmp_path, *command, "trainer.total_steps=6")
    assert longer.returncode == 0, longer.stderr[-3000:]
    assert f"rlloom: resumed from {RUN}/checkpoints/global_step_4 (step 4)" in longer.stderr
    assert steps(tmp_path / RUN) == [0, 1, 2, 3, 4, 5, 6]

    never = train(tmp_path, *command, "trainer.total_steps=6", "trainer.resume=never")
    assert never.returncode == 2
    assert never.stderr.startswith(f"rlloom: error: trainer.resume=never but trainer.run_dir={RUN} already holds "
                                   f"checkpoints")

    # the name only labels the run: a run found through trainer.run_dir under another name is the same run
    renamed = train(tmp_path, *command, "trainer.total_steps=6", f"trainer.run_dir={RUN}", "trainer.run_name=renamed")
    assert renamed.returncode == 0, renamed.stderr[-3000:]
    assert renamed.stderr.startswith(f"rlloom: run renamed already finished 6/6 steps in {RUN}; to train longer raise "
                                     f"trainer.total_steps, to start over pass another trainer.run_dir")


def interrupted(cwd: Path, args: list[str], signum: int, after_step: int) -> tuple[int, str]:
    """``rlloom train *args`` in ``cwd``, sent ``signum`` once ``metrics.jsonl`` holds the training row of
    ``after_step`` (the run is then inside the next step or the checkpoint after it): its exit status and stderr."""
    process = subprocess.Popen([str(RLLOOM), "train", *args], cwd=cwd, env=run_env(), stdout=subprocess.PIPE,
                               stderr=subprocess.PIPE, text=True, preexec_fn=default_sigint)
    metrics = cwd / RUN / "metrics.jsonl"
    deadline = time.monotonic() + 240
    while time.monotonic() < deadline and process.poll() is None:
        if metrics.is_file() and any(f'"step": {after_step},' in line and "critic/score/mean" in line
                                     for line in metrics.read_text().splitlines()):
            process.send_signal(signum)
            break
        time.sleep(0.05)
    _, stderr = process.communicate(timeout=120)
    return process.returncode, stderr


def test_ctrl_c_then_sigterm_stop_with_one_line_and_the_printed_command_resumes(tmp_path, cache_dir):
    """Ctrl-C in a run after its step 5, SIGTERM in the run its printed command resumes (after a step at least two
    past where the first one logged), and the command printed then finishes the run: each signal stops the run
    with its exit status (130, 143) and one line naming the last complete checkpoint and the command, which
    resumes from it."""
    args = ["preset=tiny", "trainer.total_steps=500", "trainer.save_freq=2", "launcher.num_threads=1",
            f"model.cache_dir={cache_dir}"]
    after_step, previous = 5, None
    for signum, status in ((signal.SIGINT, 130), (signal.SIGTERM, 143)):
        returncode, stderr = interrupted(tmp_path, args, signum, after_step)
        assert returncode == status, stderr[-3000:]
        assert "Traceback" not in stderr and "[rank0]" not in stderr
        last = stderr.splitlines()[-1]
        said = [line for line in stderr.splitlines() if line.startswith("rlloom:")]
        if previous is None:
            assert said == [last]
        else:  # the resumed run's first line, then only the interrupt's
            assert len(said) == 2 and said[1] == last, said
            assert said[0].startswith(f"rlloom: resumed from {previous[1]} (step {previous[0]})"), said
        latest = CheckpointManager(str(tmp_path / RUN)).latest().step
        checkpoint = os.path.join(RUN, "checkpoints", f"global_step_{latest}")
        match = re.fullmatch(rf"rlloom: interrupted in step (\d+)/500 of run {NAME}; last complete checkpoint: "
                             rf"{re.escape(checkpoint)} \(step {latest}\); to resume from it run: (.*)", last)
        assert match, last
        assert int(match.group(1)) >= latest >= after_step - 1
        assert shlex.split(match.group(2)) == ["rlloom", "train", *args]
        # the next signal after an odd step (the checkpoint before it is then complete) two past every row logged
        after_step = max(steps(tmp_path / RUN)) + 2
        after_step, previous = after_step + 1 - after_step % 2, (latest, checkpoint)

    end = latest + 2
    resumed = train(tmp_path, *args, f"trainer.total_steps={end}")
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    assert f"rlloom: resumed from {checkpoint} (step {latest})" in resumed.stderr
    assert steps(tmp_path / RUN) == list(range(end + 1))  # the rows logged after the checkpoint were dropped


def refused_in_use(result: subprocess.CompletedProcess, run_dir: Path, pid: int) -> bool:
    return (result.returncode == 2 and "Traceback" not in result.stderr
            and result.stderr.startswith(f"rlloom: error: the run folder {run_dir} is in use by another rlloom train "
                                         f"(pid {pid}, which holds {run_dir / LOCK_FILE})"))


def test_a_run_folder_whose_lock_is_held_is_refused_naming_the_holder(tmp_path, cache_dir):
    run_dir = tmp_path / "run"
    with run_lock(str(run_dir)):
        result = train(tmp_path, *SHORT, f"trainer.run_dir={run_dir}", f"model.cache_dir={cache_dir}")
    assert refused_in_use(result, run_dir, os.getpid()), result.stderr[-3000:]
    assert os.listdir(run_dir) == [LOCK_FILE]  # the refused run wrote nothing


@pytest.mark.slow
def test_a_second_run_on_a_folder_in_use_exits_2_and_the_first_finishes_intact(tmp_path, cache_dir):
    run_dir = tmp_path / "run"
    # ~0.2 s a step: the first run is still training when the second has loaded torch and tries the lock
    args = [*SHORT[:1], "trainer.total_steps=100", *SHORT[2:], "trainer.keep_last_n=1", f"trainer.run_dir={run_dir}",
            f"model.cache_dir={cache_dir}"]
    first = subprocess.Popen([str(RLLOOM), "train", *args], cwd=tmp_path, env=run_env(), stdout=subprocess.PIPE,
                             stderr=subprocess.PIPE, text=True)
    metrics = run_dir / "metrics.jsonl"
    deadline = time.monotonic() + 240
    while time.monotonic() < deadline and first.poll() is None and not (
            metrics.is_file() and '"step": 1,' in metrics.read_text()):
        time.sleep(0.05)
    second = train(tmp_path, *args)
    assert first.poll() is None, "the first run ended before the second started: lengthen it"
    assert refused_in_use(second, run_dir, first.pid), second.stderr[-3000:]
    _, stderr = first.communicate(timeout=240)
    assert first.returncode == 0, stderr[-3000:]
    assert steps(run_dir) == list(range(101))
    assert [checkpoint.step for checkpoint in CheckpointManager(str(run_dir)).complete()] == [100]


def test_a_lock_left_by_a_killed_run_never_blocks(tmp_path, cache_dir):
    run_dir = tmp_path / "run"
    args = [*SHORT, f"trainer.run_dir={run_dir}", f"model.cache_dir={cache_dir}"]
    process = subprocess.Popen([str(RLLOOM), "train", *args], cwd=tmp_path, env=run_env(),
                               stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline = time.monotonic() + 240
    while time.monotonic() < deadline and process.poll() is None and not (run_dir / "metrics.jsonl").is_file():
        time.sleep(0.05)
    process.kill()
    assert process.wait(timeout=60) == -signal.SIGKILL
    assert (run_dir / LOCK_FILE).read_text() == f"{process.pid}\n"  # the lock file stays, its lock does not
    result = train(tmp_path, *args)
    assert result.returncode == 0, result.stderr[-3000:]
    assert steps(run_dir) == [0, 1, 2, 3, 4]

def test_a_config_file_with_command_line_overrides():
    resolved = compose_with_file(str(EXAMPLE), ["trainer.total_steps=7", "algorithm=rloo", "algorithm.n=4"])
    trainer = resolved.sections["trainer"]
    assert (resolved.choices["model"], resolved.choices["data"], resolved.choices["algorithm"]) == (
        "tiny", "digits", "rloo")  # the file's choices, and the command line's over the file's
    assert (trainer.total_steps, trainer.save_freq, trainer.run_name) == (7, 5, "digits-tiny")
    assert (resolved.sections["algorithm"].n, resolved.sections["sampling"].max_new_tokens) == (4, 4)


@pytest.mark.parametrize("text, message", [
    ("choices: {algorithm: grpo}\ntrainer:\n  total_stepz: 3\n", "{path}: trainer.total_stepz: no such key in "
     "trainer=default. Valid keys of trainer: "),
    ("choices:\n  algorithm: nope\n", "{path}: algorithm=nope: no installed plugin provides algorithm 'nope'."),
    ("trainer:\n  total_steps: abc\n", "{path}: trainer.total_steps: invalid value (expected int)"),
    ("algorithm: ppo\n", "{path}: algorithm: expected a mapping of keys, got 'ppo' (choose an option under choices: "
     "{{algorithm: ppo}})."),
    ("trainr:\n  seed: 1\n", "{path}: trainr: no such key. Top-level keys of a config file are: choices, preset, "),
    ("trainer: [1\n", "{path}: not valid YAML (line 2): expected ',' or ']'"),
])
def test_errors_in_a_config_file_name_the_file_and_the_key(tmp_path, text, message):
    path = tmp_path / "experiment.yaml"
    path.write_text(text)
    with pytest.raises(ConfigError) as error:
        compose_with_file(str(path), [])
    assert str(error.value).startswith(message.format(path=path)) and "\n" not in str(error.value)


def test_a_missing_config_file_is_a_config_error_with_exit_status_2(tmp_path):
    result = train(tmp_path, "--config", "nope.yaml")
    assert (result.returncode, result.stderr) == (2, "rlloom: error: --config nope.yaml: no such file.\n")


def test_version_lists_rlloom_and_the_installed_plugin_distributions():
    result = subprocess.run([str(RLLOOM), "--version"], capture_output=True, text=True, timeout=60)
    assert result.returncode == 0, result.stderr
    lines = result.stdout.splitlines()
    assert re.fullmatch(rf"rlloom {re.escape(rlloom.__version__)}( \(git [0-9a-f]{{12}}(, modified)?\))?", lines[0])
    assert f"rlloom-grpo {importlib.metadata.version('rlloom-grpo')}" in lines[1:]
    assert f"rlloom-fsdp {importlib.metadata.version('rlloom-fsdp')}" in lines[1:]
