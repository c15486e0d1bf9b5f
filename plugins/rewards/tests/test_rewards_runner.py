"""Reward execution: in-process and pooled scoring, per-sample timeouts, error/timeout counting."""

from __future__ import annotations

import os
import threading
from pathlib import Path

import pytest
from rlloom import Batch
from rlloom_rewards.python_fn import PythonReward, PythonRewardConfig
from rlloom_rewards.runner import ExecutionConfig

FNS = str(Path(__file__).with_name("rewards_testfns.py"))


def make_batch(responses: list[str], ground_truth: float = 2.0) -> Batch:
    return Batch(objects={"response_text": responses, "ground_truth": [ground_truth] * len(responses),
                          "extra": [{} for _ in responses]})


def python_reward(function: str = "by_prefix", **options) -> PythonReward:
    return PythonReward(PythonRewardConfig(function=f"{FNS}:{function}", **options))


@pytest.mark.parametrize("num_workers", [0, 1, 3])
def test_results_do_not_depend_on_the_worker_count(num_workers):
    # by_prefix: score = len(response) * ground_truth (2.0), component length = len(response);
    # "raise", "nan", "text" are errors (-1.0), "sleep" a timeout (-2.0).
    responses = ["ab", "raise", "abcd", "sleep", "x", "nan", "text", "abc"]
    reward = python_reward(num_workers=num_workers, timeout_s=1.0, error_score=-1.0, timeout_score=-2.0)
    try:
        result = reward(make_batch(responses))
    finally:
        reward.close()
    assert result.scores.tolist() == [4.0, -1.0, 8.0, -2.0, 2.0, -1.0, -1.0, 6.0]
    assert sorted(result.components) == ["length"]
    assert result.components["length"].tolist() == [2.0, 0.0, 4.0, 0.0, 1.0, 0.0, 0.0, 3.0]
    assert (result.num_errors, result.num_timeouts) == (3, 1)
    assert result.info["status"] == ["ok", "error", "ok", "timeout", "ok", "error", "error", "ok"]
    assert result.info["error"][1] == "ValueError: asked to raise"
    assert "non-finite" in result.info["error"][5] and "str" in result.info["error"][6]


def test_in_process_timeout_is_not_swallowed_by_the_verifier():
    reward = python_reward("swallows_everything", timeout_s=0.3, timeout_score=-3.0)
    result = reward(make_batch(["a"]))
    assert result.scores.tolist() == [-3.0]
    assert (result.num_errors, result.num_timeouts) == (0, 1)


def test_in_process_timeout_interrupts_a_busy_loop():
    result = python_reward(timeout_s=0.3)(make_batch(["busy", "ab"]))
    assert result.info["status"] == ["timeout", "ok"]
    assert result.scores.tolist() == [0.0, 4.0]


def test_a_dead_worker_makes_its_row_an_error_and_is_replaced():
    reward = python_reward(num_workers=1, error_score=-1.0)
    try:
        result = reward(make_batch(["exit", "ab", "exit", "abc"]))
    finally:
        reward.close()
    assert result.scores.tolist() == [-1.0, 4.0, -1.0, 6.0]
    assert result.num_errors == 2 and "died (exit code 3)" in result.info["error"][0]


def test_workers_are_separate_processes_reused_across_batches():
    in_process = python_reward("pid")(make_batch(["a", "b"]))
    assert in_process.scores.tolist() == [float(os.getpid())] * 2
    reward = python_reward("pid", num_workers=2)
    try:
        first = set(reward(make_batch(["a"] * 6)).scores.tolist())
        second = set(reward(make_batch(["a"] * 6)).scores.tolist())
    finally:
        reward.close()
    assert float(os.getpid()) not in first and 1 <= len(first) <= 2
    assert second <= first


def test_timeouts_in_process_need_the_main_thread():
    reward = python_reward(timeout_s=1.0)
    caught: list[RuntimeError] = []

    def score() -> None:
        try:
            reward(make_batch(["a"]))
        except RuntimeError as exc:
            caught.append(exc)

    thread = threading.Thread(target=score)
    thread.start()
    thread.join()
    assert len(caught) == 1 and "reward.num_workers >= 1" in str(caught[0])
    assert python_reward()(make_batch(["a"])).scores.tolist() == [2.0]  # no timeout: any thread is fine


@pytest.mark.parametrize(("field", "value"), [("num_workers", -1), ("timeout_s", -0.5)])
def test_execution_config_is_checked(field, value):
    with pytest.raises(ValueError, match=f"reward.{field}"):
        ExecutionConfig(**{field: value})
