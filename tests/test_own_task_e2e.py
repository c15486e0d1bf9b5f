"""Your own task end to end: a JSONL file (``data=files``) scored by a reward function in TRL's form
(``reward=python``), as docs/your-own-task.md shows it (examples/own_task/run.sh runs as typed:
tests/test_examples.py)."""

from __future__ import annotations

import json
import os
from pathlib import Path

from rlloom_trainer.testing import train_tiny

REWARD = str(Path(__file__).with_name("trl_form_reward.py"))


def test_a_jsonl_task_trains_with_a_trl_form_reward_that_gets_its_columns(tmp_path, monkeypatch, tiny_model_path):
    rows = [{"question": f"What is {a}+{b}?", "solution": str(a + b)} for a in range(4) for b in range(4)]
    data = tmp_path / "task.jsonl"
    data.write_text("".join(json.dumps(row) + "\n" for row in rows))
    log = tmp_path / "calls.jsonl"
    monkeypatch.setenv("RLLOOM_TEST_REWARD_LOG", str(log))
    metrics = train_tiny(tmp_path / "run", "data=files", f"data.train_files=[{data}]", "data.prompt_column=question",
                         "data.ground_truth_column=solution", "data.extra_columns=[solution]",
                         "data.val_fraction=0.25", "data.string_prompts=raw", "reward=python",
                         f"reward.function={REWARD}:digit_share", "trainer.total_steps=2",
                         cache_dir=os.path.dirname(tiny_model_path))
    calls = [json.loads(line) for line in log.read_text().splitlines()]
    answers = {row["question"]: row["solution"] for row in rows}
    for call in calls:  # each completion's solution is its own prompt's, and its ids came along
        assert len(call["prompts"]) == len(call["solution"]) == len(call["ids"])
        assert all(answers[prompt] == solution for prompt, solution in zip(call["prompts"], call["solution"]))
        assert all(isinstance(ids, list) and all(isinstance(i, int) for i in ids) for ids in call["ids"])
    train = [row for row in metrics if "reward/errors" in row]
    assert [row["step"] for row in train] == [1, 2] and all(row["reward/errors"] == 0 for row in train)
    assert all(0.0 <= row["critic/score/mean"] <= 1.0 for row in train)

