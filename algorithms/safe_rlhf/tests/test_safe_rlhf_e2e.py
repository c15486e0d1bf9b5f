"""``rlloom train preset=tiny algorithm=safe_rlhf reward=digit_fraction cost=forbidden_digits``: real
runs (hf rollout, FSDP2 actor, reference, reward critic and cost critic) on the tiny model.

The reward pays for digits; the cost is 1 for a response holding any of the digits 0-7, so the
easiest way to the reward breaks the constraint. Unconstrained (λ ≈ 0, frozen) the policy keeps
answering with forbidden digits (a third of its responses or more); constrained, λ rises while the
cost is above the limit and the policy keeps the reward with the two allowed digits."""

from __future__ import annotations

import math
import os

import pytest
import torch
from rlloom_trainer.run_state import TrainerState
from rlloom_trainer.testing import train_tiny, training_rows

LIMIT, LAMBDA_INIT, STEPS = 0.1, 0.05, 30
TASK = [  # on top of preset=tiny
    "algorithm=safe_rlhf",
    "model.num_heads=4",  # the tiny model the constants here were tuned on (preset=tiny's has 2 heads since)
    "cost=forbidden_digits",
    "cost.digits=01234567",
    f"algorithm.cost_limit={LIMIT}",
    "algorithm.episode_cost_window=32",  # one step's responses (4 prompts × 8)
    "train_engine.critic_lr=1e-2",
    f"trainer.total_steps={STEPS}",
    "trainer.trackers=[jsonl]",
]
CONSTRAINED = [*TASK, f"algorithm.lambda_init={LAMBDA_INIT}", "algorithm.lambda_lr=5", "trainer.save_freq=15"]
UNCONSTRAINED = [*TASK, "algorithm.lambda_init=1e-6", "algorithm.lambda_lr=0"]


def one_thread_run(run_dir, *overrides, cache_dir):
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        return training_rows(train_tiny(run_dir, *overrides, cache_dir=cache_dir))
    finally:
        torch.set_num_threads(threads)


@pytest.fixture(scope="module")
def cache(tmp_path_factory):
    return tmp_path_factory.mktemp("cache")


@pytest.fixture(scope="module")
def constrained(tmp_path_factory, cache):
    run_dir = tmp_path_factory.mktemp("safe-run")
    return run_dir, one_thread_run(run_dir, *CONSTRAINED, cache_dir=cache)


def mean(values):
    return sum(values) / len(values)


@pytest.mark.slow
def test_constraint_is_broken_then_kept_while_the_reward_rises(constrained):
    _, rows = constrained
    assert [row["step"] for row in rows] == list(range(1, STEPS + 1))
    costs = [row["cost/score/mean"] for row in rows]
    lambdas = [row["safe/lambda"] for row in rows]
    peak = max(range(STEPS), key=lambda i: lambdas[i])
    assert max(costs) > 2 * LIMIT, costs  # the reward's pull breaks the constraint first …
    assert lambdas[peak] > 3 * LAMBDA_INIT, lambdas  # … so λ rises …
    assert mean(costs[-5:]) < LIMIT, costs  # … until the cost is below the limit
    assert lambdas[-1] < lambdas[peak]  # where λ comes down again
    first = mean([row["critic/score/mean"] for row in rows[:3]])
    last = mean([row["critic/score/mean"] for row in rows[-5:]])
    assert last > first + 0.5, (first, last)
    for key in ("cost_critic/vf_loss", "critic/vf_loss", "safe/episode_cost", "safe/cost_advantages/mean"):
        assert all(math.isfinite(row[key]) for row in rows), key


@pytest.mark.slow
def test_without_the_multiplier_the_policy_breaks_the_constraint(tmp_path, cache):
    rows = one_thread_run(tmp_path, *UNCONSTRAINED, cache_dir=cache)
    costs = [row["cost/score/mean"] for row in rows]
    assert mean(costs[-15:]) > 2 * LIMIT, costs  # (the constrained run's last five: below LIMIT)
    assert mean([row["critic/score/mean"] for row in rows[-5:]]) > 0.9


@pytest.mark.slow
def test_lambda_and_both_critics_are_checkpointed_and_resume(constrained, tmp_path, cache):
    run_dir, rows = constrained
    checkpoint = os.path.join(run_dir, "checkpoints", "global_step_15")
    assert {"actor", "critic", "cost_critic"} <= set(os.listdir(checkpoint))
    state = TrainerState.read(checkpoint)
    assert math.exp(state.algorithm["lagrange"]["log_lambda"]) == pytest.approx(rows[14]["safe/lambda"])
    resumed = one_thread_run(tmp_path, *CONSTRAINED, f"trainer.resume={checkpoint}", cache_dir=cache)
    assert [row["step"] for row in resumed] == list(range(16, STEPS + 1))
    for key in ("safe/lambda", "cost/score/mean", "critic/score/mean", "cost_critic/vf_loss"):
        assert [row[key] for row in resumed] == [row[key] for row in rows[15:]], key
