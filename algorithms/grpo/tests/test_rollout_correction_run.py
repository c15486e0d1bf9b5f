"""A tiny GRPO run (``preset=tiny``: hf rollout, FSDP2 actor, on the CPU) with rollout correction on:
the step computes ``old_log_probs`` for the weights and logs ``rollout_corr/*`` every step."""

import math

import pytest
from rlloom_trainer.testing import train_tiny, training_rows


@pytest.mark.slow
def test_tiny_grpo_trains_with_token_level_truncated_correction(tmp_path):
    rows = training_rows(train_tiny(tmp_path, "algorithm.rollout_is=token", "algorithm.rollout_is_threshold=2.0",
                                    "trainer.total_steps=3", "trainer.trackers=[jsonl]"))
    assert [row["step"] for row in rows] == [1, 2, 3]
    for row in rows:
        for name in ("is_weight_mean", "is_weight_max", "is_weight_min", "clipped_fraction"):
            assert math.isfinite(row[f"rollout_corr/{name}"]), (name, row)
        # the same float32 model in both engines on the CPU: the weights are 1 up to kernel noise
        assert 0.9 < row["rollout_corr/is_weight_min"] <= row["rollout_corr/is_weight_mean"] <= \
            row["rollout_corr/is_weight_max"] < 1.1
        assert "timing_s/old_log_prob" in row  # the weights need π_old: its pass ran with one update a step
        assert math.isfinite(row["critic/score/mean"]) and math.isfinite(row["actor/pg_loss"])


@pytest.mark.slow
def test_tiny_grpo_trains_in_bypass_mode_without_the_old_log_prob_pass(tmp_path):
    # two updates a step: without bypass_mode the step would run the behaviour pass
    rows = training_rows(train_tiny(tmp_path, "algorithm.bypass_mode=true", "algorithm.ppo_epochs=2",
                                    "trainer.total_steps=3", "trainer.trackers=[jsonl]"))
    assert [row["step"] for row in rows] == [1, 2, 3]
    for row in rows:
        assert "timing_s/old_log_prob" not in row and not any(name.startswith("rollout_corr/") for name in row)
        assert math.isfinite(row["critic/score/mean"]) and math.isfinite(row["actor/pg_loss"])
        assert row["actor/ppo_kl"] != 0.0  # the ratio is π / π_rollout, not a detached copy of π
