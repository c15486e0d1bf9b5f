"""The reward executor: in-process and pooled scoring, per-sample timeouts, error/timeout counting,
declared components, and rows taken from a batch."""

from __future__ import annotations

import os
import threading

import pytest
import scoring_verifiers as fns
import torch
from rlloom import Batch, BatchError
from rlloom_rewardkit import ExecutionConfig, RowReward, RowScorer, Verdict


def rows(responses: list[str], ground_truth: float = 2.0) -> list[tuple]:
    return [(response, ground_truth) for response in responses]


def score(verify, responses: list[str], components=(), **options):
    """``verify`` over ``responses`` by a scorer built from ``options``, whose workers are stopped after."""
    scorer = RowScorer(ExecutionConfig(**options), components)
    try:
        return scorer.score(verify, rows(responses))
    finally:
        scorer.close()


@pytest.mark.parametrize("num_workers", [0, 1, 3])
def test_results_do_not_depend_on_the_worker_count(num_workers):
    # by_prefix: score = len(response) * ground_truth (2.0), component length = len(response);
    # "raise", "nan", "text" are errors (-1.0), "sleep" and "deadline" timeouts (-2.0).
    responses = ["ab", "raise", "abcd", "sleep", "x", "nan", "text", "abc", "deadline"]
    result = score(fns.by_prefix, responses, num_workers=num_workers, timeout_s=1.0, error_score=-1.0,
                   timeout_score=-2.0)
    assert result.scores.tolist() == [4.0, -1.0, 8.0, -2.0, 2.0, -1.0, -1.0, 6.0, -2.0]
    assert sorted(result.components) == ["length"]
    assert result.components["length"].tolist() == [2.0, 0.0, 4.0, 0.0, 1.0, 0.0, 0.0, 3.0, 0.0]
    assert (result.num_errors, result.num_timeouts) == (3, 2)
    assert result.info["status"] == ["ok", "error", "ok", "timeout", "ok", "error", "error", "ok", "timeout"]
    assert result.info["error"][1] == "ValueError: asked to raise"
    assert "non-finite" in result.info["error"][5] and "str" in result.info["error"][6]
    assert result.info["error"][8] == "SampleTimeout: the verifier's own budget ran out"


def test_in_process_timeout_is_not_swallowed_by_the_verifier():
    result = score(fns.swallows_everything, ["a"], timeout_s=0.3, timeout_score=-3.0)
    assert result.scores.tolist() == [-3.0]
    assert (result.num_errors, result.num_timeouts) == (0, 1)


def test_in_process_timeout_interrupts_a_busy_loop():
    result = score(fns.by_prefix, ["busy", "ab"], timeout_s=0.3)
    assert result.info["status"] == ["timeout", "ok"]
    assert result.scores.tolist() == [0.0, 4.0]


def test_a_dead_worker_makes_its_row_an_error_and_is_replaced():
    result = score(fns.by_prefix, ["exit", "ab", "exit", "abc"], num_workers=1, error_score=-1.0)
    assert result.scores.tolist() == [-1.0, 4.0, -1.0, 6.0]
    assert result.num_errors == 2 and "died (exit code 3)" in result.info["error"][0]


def test_workers_are_separate_processes_reused_across_batches():
    assert score(fns.pid, ["a", "b"]).scores.tolist() == [float(os.getpid())] * 2
    scorer = RowScorer(ExecutionConfig(num_workers=2))
    try:
        first = set(scorer.score(fns.pid, rows(["a"] * 6)).scores.tolist())
        second = set(scorer.score(fns.pid, rows(["a"] * 6)).scores.tolist())
    finally:
        scorer.close()
    assert float(os.getpid()) not in first and 1 <= len(first) <= 2
    assert second <= first


def test_timeouts_in_process_need_the_main_thread():
    caught: list[RuntimeError] = []

    def run() -> None:
        try:
            score(fns.by_prefix, ["a"], timeout_s=1.0)
        except RuntimeError as exc:
            caught.append(exc)

    thread = threading.Thread(target=run)
    thread.start()
    thread.join()
    assert len(caught) == 1 and "reward.num_workers >= 1" in str(caught[0])
    assert score(fns.by_prefix, ["a"]).scores.tolist() == [2.0]  # no timeout: any thread is fine


@pytest.mark.parametrize(("field", "value"), [("num_workers", -1), ("timeout_s", -0.5)])
def test_execution_config_is_checked(field, value):
    with pytest.raises(ValueError, match=f"reward.{field}"):
        ExecutionConfig(**{field: value})


def test_a_raising_verifier_is_counted_and_scored_error_score():
    def verify(x):
        if x % 2:
            raise RuntimeError(f"odd {x}")
        return Verdict(x / 10, {"even": 1.0})

    scorer = RowScorer(ExecutionConfig(error_score=-7.0), components=["even"])
    result = scorer.score(verify, [(0,), (1,), (2,), (3,), (4,)])
    assert torch.equal(result.scores, torch.tensor([0.0, -7.0, 0.2, -7.0, 0.4]))
    assert torch.equal(result.components["even"], torch.tensor([1.0, 0.0, 1.0, 0.0, 1.0]))
    assert result.num_errors == 2
    assert result.info["error"] == ["", "RuntimeError: odd 1", "", "RuntimeError: odd 3", ""]


def test_a_verdict_missing_a_declared_component_is_an_error():
    result = RowScorer(ExecutionConfig(error_score=0.5), ["correct"]).score(lambda x: Verdict(1.0, {}), [(1,)])
    assert result.num_errors == 1
    assert result.scores.tolist() == [0.5]
    assert "correct" in result.info["error"][0]


def test_declared_components_are_reported_even_when_no_row_scored():
    result = score(fns.by_prefix, ["raise", "raise"], components=["length"])
    assert result.components["length"].tolist() == [0.0, 0.0]
    assert score(fns.by_prefix, ["raise"]).components == {}  # undeclared: only what a verdict carried


def test_a_row_reward_takes_its_rows_from_the_batch_fields():
    seen: list[tuple] = []

    def verify(*row):
        seen.append(row)
        return Verdict(1.0)

    reward = RowReward(verify, ExecutionConfig(), ("response_text", "ground_truth", "extra"), defaults={"extra": {}})
    result = reward(Batch(objects={"response_text": ["a", "b"], "ground_truth": [1, 2]}))
    assert result.scores.tolist() == [1.0, 1.0]
    assert seen == [("a", 1, {}), ("b", 2, {})]
    with pytest.raises(BatchError, match="ground_truth"):
        reward(Batch(objects={"response_text": ["a"], "extra": [{}]}))
    reward.close()


def test_each_new_error_message_is_printed_once_up_to_the_limit(capsys, monkeypatch):
    from rlloom_rewardkit import runner
    from rlloom_rewardkit.outcome import ERROR, OK, Outcome

    monkeypatch.setattr(runner, "_printed", set())
    scorer = RowScorer(ExecutionConfig(error_score=-1.0))
    messages = ["TypeError: a", "TypeError: a", "KeyError: b", "ValueError: c", "OSError: d"]
    scorer.result([Outcome(OK, Verdict(1.0))] + [Outcome(ERROR, message=m) for m in messages[:2]])
    scorer.result([Outcome(ERROR, message=m) for m in messages])
    lines = capsys.readouterr().err.splitlines()
    assert lines == ["reward: a row scored -1 as an error, counted in reward/errors: TypeError: a",
                     "reward: a row scored -1 as an error, counted in reward/errors: KeyError: b",
                     "reward: a row scored -1 as an error, counted in reward/errors: ValueError: c "
                     "(later new errors are counted, not printed)"]
