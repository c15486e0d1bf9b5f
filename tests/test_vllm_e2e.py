"""``rlloom_trainer.train`` with ``rollout=vllm``: the tiny GRPO run learns and vLLM's log-probs track the
trainer's; the default (SmolLM2) config completes a short run."""

from __future__ import annotations

import re

import pytest
import rlloom_trainer
from rlloom_trainer.testing import metric_rows, train_tiny, training_rows

# On top of preset=tiny, as typed: its model's head size (64 / 2 heads = 32) is one vLLM's CPU attention takes.
TINY_VLLM = ["rollout=vllm"]


@pytest.mark.slow
@pytest.mark.parametrize("resharder", ["in_process", "safetensors"])
def test_tiny_run_learns_with_vllm(tmp_path, resharder):
    train = training_rows(train_tiny(tmp_path / "run", *TINY_VLLM, f"resharder={resharder}",
                                     cache_dir=tmp_path / "cache"))
    assert [row["step"] for row in train] == list(range(1, 21))
    first = sum(row["critic/score/mean"] for row in train[:3]) / 3
    last = sum(row["critic/score/mean"] for row in train[-3:]) / 3
    assert last > first + 0.4, (first, last)
    for row in train:
        assert row["training/rollout_probs_diff_mean"] < 1e-3, row
        assert row["perf/weight_sync_bytes"] > 0 and "timing_s/update_weights" in row
        # The rollout slept through the update (trainer.sleep_rollout) and reports its memory per phase.
        assert {"rollout/rss_gb/before_sleep", "rollout/rss_gb/asleep", "rollout/rss_gb/awake"} <= set(row)
        assert row["rollout/rss_gb/asleep"] <= row["rollout/rss_gb/before_sleep"] + 0.05


@pytest.mark.slow
def test_default_config_completes_with_vllm(tmp_path):
    run_dir = str(tmp_path / "run")
    final = rlloom_trainer.train(["rollout=vllm", "trainer.total_steps=2", "trainer.train_batch_size=2",
                                  "algorithm.n=2", "trainer.val_max_prompts=4", "trainer.val_n=1",
                                  "trainer.test_freq=0", "sampling.max_new_tokens=8", f"trainer.run_dir={run_dir}"])
    assert [row["step"] for row in training_rows(metric_rows(run_dir))] == [1, 2]
    assert final["training/rollout_probs_diff_mean"] < 1e-3


@pytest.mark.slow
def test_the_head_size_error_gives_advice_that_works(tmp_path, capsys):
    """``model.num_heads=4`` (head size 16) with ``rollout=vllm`` names the overrides that fit vLLM's CPU kernels
    as soon as the model folder exists (``VLLMRolloutConfig.check_model``); adding exactly those (and nothing
    else: max_model_len follows the model) trains."""
    from rlloom.cli import main

    common = ["train", "preset=tiny", "rollout=vllm", f"model.cache_dir={tmp_path / 'cache'}", "trainer.total_steps=1"]
    assert main([*common, "model.num_heads=4", f"trainer.run_dir={tmp_path / 'first'}"]) == 2
    err = capsys.readouterr().err
    # a config error from the model's shape, before any engine loaded weights (not a role that failed to start)
    assert err.startswith("rlloom: error: rollout=vllm: the model at"), err
    overrides = re.findall(r"model\.\w+=\d+", err.split("set e.g.")[1])
    assert overrides == ["model.num_heads=2", "model.num_kv_heads=1"], err
    assert main([*common, *overrides, f"trainer.run_dir={tmp_path / 'second'}"]) == 0
    assert len(training_rows(metric_rows(tmp_path / "second"))) == 1
