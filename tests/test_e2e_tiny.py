"""``rlloom train preset=tiny``: a real GRPO run (hf rollout, FSDP2 actor) on the tiny model, on the
CPU and (where there is one) on a GPU in bf16."""

from __future__ import annotations

import os

import pytest
import rlloom_trainer
import torch
from rlloom_trainer.testing import device_params, metric_rows, training_rows

# Mean |p_rollout - p_trainer| per token: float32 on the CPU; bf16 in both engines on a GPU.
PROBS_DIFF_BOUND = {"cpu": 1e-3, "cuda": 1e-2}


@pytest.fixture(scope="module", params=device_params("preset=tiny trained on the GPU (bf16, NCCL group)"))
def tiny_run(request, tmp_path_factory):
    run_dir = str(tmp_path_factory.mktemp(f"tiny-run-{request.param}"))
    cache = str(tmp_path_factory.mktemp("cache"))
    # rlloom_trainer.train itself, not rlloom_trainer.testing.train_tiny: the final metrics it returns are checked too
    final = rlloom_trainer.train(["preset=tiny", f"trainer.run_dir={run_dir}", f"model.cache_dir={cache}",
                                  f"trainer.device={request.param}"])
    return run_dir, final, request.param


@pytest.mark.slow
def test_reward_rises(tiny_run):
    run_dir, final, _ = tiny_run
    rows = metric_rows(run_dir)
    train = training_rows(rows)
    assert [row["step"] for row in train] == list(range(1, 21))
    first = sum(row["critic/score/mean"] for row in train[:3]) / 3
    last = sum(row["critic/score/mean"] for row in train[-3:]) / 3
    assert last > first + 0.4, (first, last)
    val = [row for row in rows if "val-core/digits/acc/mean@2" in row]
    assert val[0]["step"] == 0 and val[-1]["step"] == 20
    assert val[-1]["val-core/digits/acc/mean@2"] > val[0]["val-core/digits/acc/mean@2"] + 0.4
    assert final["critic/score/mean"] == train[-1]["critic/score/mean"]


@pytest.mark.slow
def test_every_step_logs_the_rollout_trainer_gap(tiny_run):
    run_dir, _, device = tiny_run
    train = [row for row in metric_rows(run_dir) if row["step"] > 0]
    for row in train:
        assert row["training/rollout_probs_diff_mean"] < PROBS_DIFF_BOUND[device]
        assert ("perf/max_memory_allocated_gb" in row) == (device == "cuda")
        for key in ("timing_s/gen", "timing_s/update_actor", "timing_s/update_weights", "actor/pg_loss",
                    "actor/grad_norm", "response_length/mean", "perf/throughput"):
            assert key in row, key


@pytest.mark.slow
def test_final_policy_is_saved_in_hf_format(tiny_run):
    from transformers import AutoModelForCausalLM

    run_dir, _, _ = tiny_run
    model = AutoModelForCausalLM.from_pretrained(os.path.join(run_dir, "final_model"), dtype=torch.float32)
    ids = torch.tensor([[ord(c) for c in "Q: pick a digit\nA:"]])
    next_token = int(model(ids).logits[0, -1].argmax())
    assert chr(next_token).isdigit()


@pytest.mark.slow
def test_with_several_updates_a_step_the_gap_is_the_rollout_trainer_one(tmp_path):
    # Two epochs of two mini-batches: the behaviour log-probs come from their own pass before any
    # update, and the logged gap is that pass's; an update's log-probs hold the policy's own drift.
    from rlloom_trainer.testing import train_tiny

    rows = training_rows(train_tiny(tmp_path, "trainer.total_steps=4", "algorithm.ppo_epochs=2",
                                    "algorithm.ppo_mini_batch_size=2", "trainer.trackers=[jsonl]"))
    assert len(rows) == 4
    assert all(row["training/rollout_probs_diff_mean"] < PROBS_DIFF_BOUND["cpu"] for row in rows), rows
    assert all(row["actor/ppo_kl"] != 0.0 for row in rows)  # the later updates did move the policy
