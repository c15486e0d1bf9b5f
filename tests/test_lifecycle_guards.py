"""Guards and optional hooks of a real ``rlloom train`` run: non-finite updates abort the run after
``trainer.max_nonfinite_steps`` in a row with the step's diagnostics saved; trackers that fail to
start or to log are dropped with a warning and the run goes on; an algorithm's own state
(``state_dict``/``load_state_dict``) survives a kill and resume.

These come from a small plugin distribution installed for the test (a ``.dist-info`` folder on
``PYTHONPATH``): a reward function whose scores are NaN (so the loss and the gradients are NaN and
the FSDP engine skips every update), two trackers that raise, and GRPO with a step counter as state.
"""

from __future__ import annotations

import json
import os
import textwrap

import pytest
from lifecycle_helpers import RLLOOM, run, run_env
from rlloom_trainer.testing import metric_rows, mounted_tmpfs

PLUGIN = """
import os
import signal
import time
from dataclasses import dataclass

import torch

from rlloom import RewardResult, hookimpl
from rlloom_algokit.grpo import GRPO
from rlloom_algokit.grpo_config import GRPOConfig


@dataclass
class NanRewardConfig:
    pass


class NanReward:
    def __init__(self, cfg):
        pass

    def __call__(self, batch):
        return RewardResult(scores=torch.full((len(batch),), float("nan")))


class FailsToLog:
    def __init__(self, run_dir, config):
        pass

    def log(self, metrics, step):
        raise OSError("tracker backend unreachable")

    def close(self):
        pass


class FailsToStart:
    def __init__(self, run_dir, config):
        raise ConnectionError("no server")


class CountingGRPO(GRPO):
    # GRPO that counts the steps it has taken, as algorithm state, and logs the count.

    def __init__(self, cfg):
        super().__init__(cfg)
        self.steps_taken = 0

    def step(self, ctx, prompts):
        self.steps_taken += 1
        metrics = super().step(ctx, prompts)
        metrics["algo/steps_taken"] = float(self.steps_taken)
        return metrics

    def state_dict(self):
        return {"steps_taken": self.steps_taken}

    def load_state_dict(self, state):
        self.steps_taken = state["steps_taken"]


class LosesItsInterrupt:
    # A finalizer in which Ctrl-C lands: Python prints "Exception ignored in ..." and goes on (how a Ctrl-C was lost
    # in 1 of 4 runs of tests/test_run_cli.py's Ctrl-C test before the loop asked rlloom_trainer.sigint).

    def __del__(self):
        os.kill(os.getpid(), signal.SIGINT)
        time.sleep(0.01)  # the handler runs here; its KeyboardInterrupt cannot leave a __del__


class SwallowingGRPO(GRPO):
    # GRPO whose step 2 receives Ctrl-C inside a finalizer, then finishes normally.

    def step(self, ctx, prompts):
        if ctx.step == 2:
            LosesItsInterrupt()
        return super().step(ctx, prompts)


@hookimpl
def register_algorithms(register):
    register("counting_grpo", CountingGRPO, config=GRPOConfig)
    register("swallowing_grpo", SwallowingGRPO, config=GRPOConfig)


class RaisingReward:
    def __init__(self, cfg):
        pass

    def __call__(self, batch):
        raise ValueError("no verdict for these rows")


@hookimpl
def register_reward_fns(register):
    register("nan_score", NanReward, config=NanRewardConfig)
    register("raises", RaisingReward, config=NanRewardConfig)


@hookimpl
def register_trackers(register):
    register("fails_to_log", FailsToLog)
    register("fails_to_start", FailsToStart)
"""


@pytest.fixture(scope="module")
def plugin_env(tmp_path_factory) -> dict[str, str]:
    folder = tmp_path_factory.mktemp("guard_plugin")
    (folder / "rlloom_test_lifecycle_guards.py").write_text(textwrap.dedent(PLUGIN))
    info = folder / "rlloom_test_lifecycle_guards-0.1.0.dist-info"
    info.mkdir()
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: rlloom-test-lifecycle-guards\nVersion: 0.1.0\n")
    (info / "entry_points.txt").write_text("[rlloom]\nlifecycle_guards = rlloom_test_lifecycle_guards\n")
    return run_env(PYTHONPATH=str(folder))


@pytest.fixture(scope="module")
def aborted_run(tmp_path_factory, plugin_env):
    run_dir = str(tmp_path_factory.mktemp("aborted"))
    command = [
        str(RLLOOM), "train", "preset=tiny", "reward=nan_score", "trainer.total_steps=6",
        "trainer.max_nonfinite_steps=3",
        "trainer.val_before_train=false", "trainer.test_freq=0", "launcher.num_threads=1",
        "trainer.trackers=[fails_to_start,jsonl,fails_to_log]", f"trainer.run_dir={run_dir}",
        f"model.cache_dir={tmp_path_factory.mktemp('cache')}",
    ]
    return run_dir, run(command, plugin_env)


def test_nonfinite_updates_abort_after_k_in_a_row_with_diagnostics(aborted_run):
    run_dir, result = aborted_run
    assert result.returncode == 1, result.stderr[-3000:]
    assert "rlloom: error: step 3: 3 steps in a row had a skipped (non-finite) update" in result.stderr
    assert "Traceback" not in result.stderr
    with open(os.path.join(run_dir, "nonfinite_step_3.json")) as handle:
        diagnostics = json.load(handle)
    assert diagnostics["step"] == 3
    assert diagnostics["metrics"]["actor/skipped_update"] == 1.0
    assert diagnostics["metrics"]["actor/grad_norm"] == "nan"
    assert not os.path.exists(os.path.join(run_dir, "checkpoints"))  # nothing saved from a diverged run


@pytest.mark.slow
def test_a_resumed_run_keeps_counting_its_nonfinite_steps_in_a_row(tmp_path, plugin_env):
    """Two NaN steps, then the run ends and checkpoints; resumed for more, its third NaN step in a row (step 3,
    not 5: the count came back with the checkpoint) aborts it."""
    common = [str(RLLOOM), "train", "preset=tiny", "reward=nan_score", "trainer.max_nonfinite_steps=3",
              "trainer.val_before_train=false", "trainer.test_freq=0", "trainer.save_final_model=false",
              "launcher.num_threads=1", f"trainer.run_dir={tmp_path / 'run'}", f"model.cache_dir={tmp_path / 'cache'}"]
    first = run([*common, "trainer.total_steps=2"], plugin_env)
    assert first.returncode == 0, first.stderr[-3000:]
    resumed = run([*common, "trainer.total_steps=6"], plugin_env)
    assert resumed.returncode == 1, resumed.stderr[-3000:]
    assert "rlloom: error: step 3: 3 steps in a row had a skipped (non-finite) update" in resumed.stderr


@pytest.mark.slow
def test_a_ctrl_c_whose_keyboard_interrupt_was_swallowed_still_stops_the_run(tmp_path, plugin_env):
    """The interrupt lands in a finalizer during step 2, which then completes; the run stops before step 3."""
    result = run([str(RLLOOM), "train", "preset=tiny", "algorithm=swallowing_grpo", "trainer.total_steps=200",
                  "trainer.val_before_train=false", "launcher.num_threads=1", f"trainer.run_dir={tmp_path / 'run'}",
                  f"model.cache_dir={tmp_path / 'cache'}"], plugin_env)
    assert result.returncode == 130, result.stderr[-3000:]
    assert "Exception ignored in" in result.stderr and "KeyboardInterrupt" in result.stderr  # it was swallowed
    assert result.stderr.splitlines()[-1].startswith("rlloom: interrupted in step 2/200 of run ")
    assert [row["step"] for row in metric_rows(str(tmp_path / "run")) if "critic/score/mean" in row] == [1, 2]


def test_a_reward_plugin_that_raises_ends_the_run_in_one_paragraph(tmp_path, plugin_env):
    result = run([str(RLLOOM), "train", "preset=tiny", "reward=raises", "trainer.val_before_train=false",
                  "launcher.num_threads=1", f"trainer.run_dir={tmp_path / 'run'}",
                  f"model.cache_dir={tmp_path / 'cache'}"], plugin_env)
    assert result.returncode == 3, result.stderr[-3000:]
    assert "Traceback" not in result.stderr and "[rank0]" not in result.stderr, result.stderr[-3000:]
    assert result.stderr.splitlines()[-1] == (
        "rlloom: error: the reward role's reward function 'raises' raised ValueError: no verdict for these rows "
        "(set RLLOOM_DEBUG=1 for the worker's traceback)")


def test_failing_trackers_are_dropped_and_the_run_goes_on(aborted_run):
    run_dir, result = aborted_run
    assert "tracker fails_to_start failed to start and is disabled: no server" in result.stderr
    assert "tracker FailsToLog failed and is disabled: tracker backend unreachable" in result.stderr
    rows = metric_rows(run_dir)
    assert [row["step"] for row in rows] == [1, 2, 3]  # the jsonl tracker after the failing one kept logging
    assert all(row["actor/skipped_update"] == 1.0 and row["critic/score/mean"] is None for row in rows)


@pytest.mark.slow
def test_algorithm_state_survives_a_kill_and_resume(tmp_path, plugin_env):
    run_dir = str(tmp_path / "run")
    command = [
        str(RLLOOM), "train", "preset=tiny", "algorithm=counting_grpo", "trainer.total_steps=4", "trainer.save_freq=2",
        "trainer.val_before_train=false", "trainer.test_freq=0", "launcher.num_threads=1", "trainer.trackers=[jsonl]",
        f"trainer.run_dir={run_dir}", f"model.cache_dir={tmp_path / 'cache'}",
    ]
    killed = run(command, {**plugin_env, "RLLOOM_TEST_KILL_AT": "during_save:4"})
    assert killed.returncode == -9
    resumed = run(command, plugin_env)
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    counts = [(row["step"], row["algo/steps_taken"]) for row in metric_rows(run_dir)]
    assert counts == [(1, 1.0), (2, 2.0), (3, 3.0), (4, 4.0)]  # a fresh algorithm would restart at 1


def test_a_full_disk_under_metrics_jsonl_stops_the_run_with_one_paragraph(tmp_path):
    # A 12 KiB tmpfs holds config.yaml and a few rows of metrics.jsonl; then the record cannot grow.
    disk = tmp_path / "disk"
    with mounted_tmpfs(disk, "12k"):
        result = run([str(RLLOOM), "train", "preset=tiny", f"trainer.run_dir={disk / 'run'}", "trainer.total_steps=30",
                      "trainer.trackers=[jsonl]", f"model.cache_dir={tmp_path / 'cache'}"], env=run_env())
    assert result.returncode == 1, result.stderr[-2000:]
    last = result.stderr.strip().splitlines()[-1]
    assert last.startswith("rlloom: error: tracker JsonlTracker could not record step "), result.stderr[-2000:]
    assert "No space left on device" in last and f"re-run with trainer.run_dir={disk / 'run'}" in last
    assert "Traceback" not in result.stderr
