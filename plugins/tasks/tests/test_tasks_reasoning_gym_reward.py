"""reward=reasoning_gym scores with reasoning-gym's own verifiers, on answers built from the entries."""

import pytest
from rlloom import Batch
from rlloom_tasks.data.gym import ReasoningGymDataConfig, build_reasoning_gym
from rlloom_tasks.rewards.gym import AnswerFormat, ReasoningGymReward, ReasoningGymRewardConfig


def _records(task: str, count: int = 3):
    return build_reasoning_gym(ReasoningGymDataConfig(task=task, num_train=count, num_val=1), seed=0).train


def _score(records, responses, cfg=None):
    batch = Batch(objects={"response_text": responses, "extra": [r.extra for r in records]})
    return ReasoningGymReward(cfg or ReasoningGymRewardConfig())(batch)


def _wrong_number(answer: str) -> str:
    """answer + 1: never equal to the answer and never containing it as a substring."""
    return str(int(answer) + 1)


@pytest.mark.parametrize("task", ["basic_arithmetic", "chain_sum"])
def test_numeric_tasks_correct_wrong_partial_and_missing_answers(task):
    records = _records(task)
    answers = [r.extra["entry"]["answer"] for r in records]
    correct = [f"<think>easy</think><answer>{a}</answer>" for a in answers]
    wrong = [f"<answer>{_wrong_number(a)}</answer>" for a in answers]
    result = _score(records, correct)
    assert result.scores.tolist() == [1.0] * 3
    assert result.components["correct"].tolist() == [1.0] * 3
    assert _score(records, wrong).scores.tolist() == [0.0] * 3

    # The oracle inside a longer answer scores len(oracle) / len(answer) in reasoning-gym.
    padded = f"{answers[0]} apples"
    partial = _score(records[:1], [f"<answer>{padded}</answer>"])
    assert partial.scores.tolist() == pytest.approx([len(answers[0]) / len(padded)])
    assert partial.components["correct"].tolist() == [0.0]

    missing = _score(records[:1], [answers[0]])  # right number, but no <answer> tag
    assert missing.scores.tolist() == [0.0]
    assert missing.components["format"].tolist() == [0.0]


def test_countdown_correct_wrong_and_missing_answers():
    records = _records("countdown", count=2)
    entries = [r.extra["entry"] for r in records]
    sums = [" + ".join(str(n) for n in e["metadata"]["numbers"]) for e in entries]
    assert all(eval(s) != e["metadata"]["target"] for s, e in zip(sums, entries, strict=True))  # noqa: S307 - our own text
    assert _score(records, [f"<answer>{e['answer']}</answer>" for e in entries]).scores.tolist() == [1.0, 1.0]
    # countdown: every number used but the wrong value -> 0.05; no answer at all -> 0.01.
    assert _score(records, [f"<answer>{s}</answer>" for s in sums]).scores.tolist() == pytest.approx([0.05, 0.05])
    assert _score(records, ["I give up", "no tags"]).scores.tolist() == pytest.approx([0.01, 0.01])


def test_answer_format_boxed():
    records = _records("chain_sum", count=2)
    answers = [r.extra["entry"]["answer"] for r in records]
    cfg = ReasoningGymRewardConfig(answer_format=AnswerFormat.boxed)
    result = _score(records, [rf"so \boxed{{{answers[0]}}}", f"<answer>{answers[1]}</answer>"], cfg)
    assert result.scores.tolist() == [1.0, 0.0]
    assert result.components["format"].tolist() == [1.0, 0.0]


def test_malformed_extra_is_counted_not_fatal():
    records = _records("chain_sum", count=2)
    answer = records[0].extra["entry"]["answer"]
    batch = Batch(objects={
        "response_text": [f"<answer>{answer}</answer>"] * 3,
        "extra": [records[0].extra, {}, {**records[1].extra, "task": "no_such_task"}],
    })
    result = ReasoningGymReward(ReasoningGymRewardConfig(error_score=-1.0))(batch)
    assert result.scores.tolist() == [1.0, -1.0, -1.0]
    assert result.num_errors == 2
    assert result.info["error"][1].startswith("KeyError")
    assert "no_such_task" in result.info["error"][2]
