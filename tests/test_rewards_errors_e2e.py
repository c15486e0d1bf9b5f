"""A run whose reward function raises on ~20% of samples completes and reports every error."""

from __future__ import annotations

import os
from pathlib import Path

from rlloom_trainer.testing import train_tiny

FLAKY = str(Path(__file__).with_name("rewards_flaky_fn.py"))
ROWS_PER_STEP = 4 * 8  # preset=tiny: 4 prompts x algorithm.n=8


def test_a_run_with_a_raising_reward_completes_and_counts_its_errors(tmp_path, monkeypatch, tiny_model_path):
    log = tmp_path / "calls.log"
    monkeypatch.setenv("RLLOOM_TEST_REWARD_LOG", str(log))
    rows = train_tiny(tmp_path / "run", "reward=python", f"reward.function={FLAKY}:flaky", "reward.error_score=-1.0",
                      "trainer.total_steps=3", "trainer.val_before_train=false",
                      cache_dir=os.path.dirname(tiny_model_path))
    train = [row for row in rows if "reward/errors" in row]
    assert [row["step"] for row in train] == [1, 2, 3]
    # The training steps scored the first 3 * 32 calls, in order (in-process scoring), then validation.
    raised = [int(line) for line in log.read_text().split()]
    assert len(raised) > 3 * ROWS_PER_STEP
    for row in train:
        calls = raised[(row["step"] - 1) * ROWS_PER_STEP : row["step"] * ROWS_PER_STEP]
        assert row["reward/errors"] == sum(calls)
        assert row["reward/timeouts"] == 0
        # Digit shares are >= 0, so the minimum is the error score exactly when a row failed.
        assert (row["critic/score/min"] == -1.0) == (sum(calls) > 0)
    total = sum(row["reward/errors"] for row in train)
    assert 0.05 * 3 * ROWS_PER_STEP < total < 0.4 * 3 * ROWS_PER_STEP, total
