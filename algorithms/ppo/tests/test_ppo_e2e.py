"""``rlloom train preset=tiny algorithm=ppo``: one real PPO run (hf rollout, FSDP2 actor, reference
and critic) on the tiny model, shared by every assertion below."""

from __future__ import annotations

import pytest
import torch
from rlloom_trainer.testing import train_tiny, training_rows

STEPS, N, PROMPTS, WARMUP = 20, 16, 4, 2
ACTOR_LR, CRITIC_LR, KL_COEF, KL_HORIZON = 1.5e-3, 1e-2, 1e-3, 10000
OVERRIDES = [  # on top of preset=tiny
    "algorithm=ppo",
    f"algorithm.n={N}",  # 64 responses a step: enough for the critic to learn within 20 steps
    "algorithm.ppo_epochs=2",
    "algorithm.ppo_mini_batch_size=2",
    f"algorithm.critic_warmup={WARMUP}",
    "algorithm.use_kl_in_reward=true",
    "algorithm.kl_ctrl_type=adaptive",
    f"algorithm.kl_coef={KL_COEF}",
    f"algorithm.kl_horizon={KL_HORIZON}",
    # a slower actor keeps the scores varied (and so the critic's targets) through the run
    f"train_engine.lr={ACTOR_LR}",
    f"train_engine.critic_lr={CRITIC_LR}",
    "trainer.trackers=[jsonl]",
]


@pytest.fixture(scope="module")
def ppo_rows(tmp_path_factory):
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        rows = train_tiny(tmp_path_factory.mktemp("ppo-run"), *OVERRIDES, cache_dir=tmp_path_factory.mktemp("cache"))
    finally:
        torch.set_num_threads(threads)
    return training_rows(rows)


def mean(values):
    return sum(values) / len(values)


@pytest.mark.slow
def test_ppo_reward_rises(ppo_rows):
    assert [row["step"] for row in ppo_rows] == list(range(1, STEPS + 1))
    first = mean([row["critic/score/mean"] for row in ppo_rows[:3]])
    last = mean([row["critic/score/mean"] for row in ppo_rows[-3:]])
    assert last > first + 0.4, (first, last)


@pytest.mark.slow
def test_ppo_critic_explains_more_variance_as_it_trains(ppo_rows):
    explained = [row["critic/vf_explained_var"] for row in ppo_rows]
    assert explained[0] == pytest.approx(0.0, abs=1e-6)  # the zero-initialised head predicts 0 everywhere
    first, last = mean(explained[:5]), mean(explained[-5:])
    assert last > 0.05 and last > first + 0.05, explained


@pytest.mark.slow
def test_ppo_warmup_trains_only_the_critic_with_its_own_lr(ppo_rows):
    for row in ppo_rows:
        assert row["critic/lr"] == pytest.approx(CRITIC_LR)
        for key in ("critic/vf_loss", "critic/vf_clipfrac", "critic/grad_norm", "critic/values/mean",
                    "critic/returns/mean", "critic/advantages/mean", "timing_s/values", "timing_s/update_critic"):
            assert key in row, (row["step"], key)
        trained_actor = row["step"] > WARMUP
        assert ("actor/pg_loss" in row) == trained_actor and ("timing_s/update_weights" in row) == trained_actor
        if trained_actor:
            assert row["actor/lr"] == pytest.approx(ACTOR_LR)


@pytest.mark.slow
def test_ppo_adaptive_kl_coefficient_follows_the_measured_kl(ppo_rows):
    responses = N * PROMPTS
    beta = KL_COEF
    for row in ppo_rows:
        assert row["actor/kl_coef"] == pytest.approx(beta, rel=1e-9)
        error = min(max(row["actor/reward_kl_penalty"] / 0.1 - 1, -0.2), 0.2)  # default kl_target 0.1
        beta *= 1 + error * responses / KL_HORIZON
    # the actor equals the reference until it first updates: no KL during the warm-up
    assert [row["actor/reward_kl_penalty"] for row in ppo_rows[:WARMUP]] == [0.0] * WARMUP
    assert ppo_rows[-1]["actor/reward_kl_penalty"] > 0.1
