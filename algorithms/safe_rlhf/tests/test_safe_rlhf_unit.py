"""Safe-RLHF's pieces against values computed by hand or with a few lines of numpy: λ's update, the
Lagrangian advantage, the KL-shaped rewards and costs, GAE for both critics, config checks."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from rlloom import Batch
from rlloom.plugins.registry import Registry
from rlloom_safe_rlhf.algorithm import SafeRLHF, lagrangian_advantages
from rlloom_safe_rlhf.config import SafeRLHFConfig
from rlloom_safe_rlhf.lagrange import LagrangeMultiplier


def test_plugin_registers_safe_rlhf():
    component = Registry().get("algorithm", "safe_rlhf")
    assert component.factory is SafeRLHF and component.config is SafeRLHFConfig
    assert component.distribution == "rlloom-safe-rlhf"
    assert SafeRLHF.needs_critic is True
    assert [(role.name, role.kind, role.serves_as) for role in SafeRLHFConfig.extra_roles] == [
        ("cost", "reward", None), ("cost_critic", "train_engine", "critic")]


def test_multiplier_ascends_on_violation_and_descends_below_the_limit():
    multiplier = LagrangeMultiplier(init=1.0, lr=0.1, limit=0.25, window=4)
    multiplier.observe([1.0, 0.0, 1.0, 1.0])  # J_c = 0.75
    assert multiplier.update() == pytest.approx(0.5)
    assert multiplier.log_value == pytest.approx(0.1 * 0.5 * 1.0)  # log λ += lr·(J_c − d)·λ, λ = 1
    lam = math.exp(0.05)
    multiplier.observe([0.0, 0.0, 0.0])  # the window keeps the last 4: [1, 0, 0, 0], J_c = 0.25
    assert multiplier.episode_cost() == pytest.approx(0.25)
    assert multiplier.update() == pytest.approx(0.0)
    assert multiplier.value == pytest.approx(lam)
    multiplier.observe([0.0])  # J_c = 0
    multiplier.update()
    assert multiplier.log_value == pytest.approx(0.05 + 0.1 * (0.0 - 0.25) * lam)


def test_multiplier_ceiling_and_state_round_trip():
    multiplier = LagrangeMultiplier(init=1.0, lr=10.0, limit=0.0, window=2, maximum=2.0)
    multiplier.observe([1.0, 1.0])
    multiplier.update()
    assert multiplier.value == pytest.approx(2.0)  # 1 + 10 would overshoot; capped at λ_max
    restored = LagrangeMultiplier(init=1.0, lr=10.0, limit=0.0, window=2, maximum=2.0)
    restored.load_state_dict(multiplier.state_dict())
    assert restored.value == multiplier.value and list(restored.costs) == [1.0, 1.0]


def test_lagrangian_advantage_by_hand():
    a_r, a_c = torch.tensor([2.0, -1.0]), torch.tensor([1.0, 3.0])
    assert lagrangian_advantages(a_r, a_c, 0.0).tolist() == [2.0, -1.0]
    np.testing.assert_allclose(lagrangian_advantages(a_r, a_c, 3.0).numpy(), [(2 - 3) / 4, (-1 - 9) / 4])


def gae(rewards, values, mask, gamma, lam):
    """Reference GAE over the valid tokens of each row (numpy)."""
    advantages = np.zeros_like(rewards)
    for row in range(rewards.shape[0]):
        n = int(mask[row].sum())
        last = 0.0
        for t in reversed(range(n)):
            next_value = values[row, t + 1] if t + 1 < n else 0.0
            delta = rewards[row, t] + gamma * next_value - values[row, t]
            last = delta + gamma * lam * last
            advantages[row, t] = last
    return advantages, advantages + values * mask


def safe_batch():
    return Batch({
        "token_level_scores": torch.tensor([[0.0, 1.0, 0.0], [0.0, 0.0, 0.5]]),
        "token_level_costs": torch.tensor([[0.0, 1.0, 0.0], [0.0, 0.0, 0.0]]),
        "costs": torch.tensor([1.0, 0.0]),
        "values": torch.tensor([[0.2, 0.4, 0.0], [0.1, 0.3, 0.2]]),
        "cost_values": torch.tensor([[0.5, 0.6, 0.0], [0.1, -0.2, 0.3]]),
        "old_log_probs": torch.tensor([[-1.0, -2.0, 0.0], [-0.5, -0.5, -0.5]]),
        "ref_log_probs": torch.tensor([[-1.5, -1.0, 0.0], [-0.5, -1.0, -0.25]]),
        "response_mask": torch.tensor([[1, 1, 0], [1, 1, 1]]),
    })


def test_advantages_combine_both_gaes_with_the_kl_moved_from_reward_to_cost():
    beta, gamma, lam_gae = 0.1, 0.9, 0.8
    algo = SafeRLHF(SafeRLHFConfig(kl_coef=beta, gamma=gamma, lam=lam_gae, lambda_init=2.0))
    metrics: dict[str, float] = {}
    batch = algo.compute_advantages(safe_batch(), metrics)
    mask = np.array([[1, 1, 0], [1, 1, 1]], dtype=float)
    kl = (np.array([[-1.0, -2.0, 0.0], [-0.5, -0.5, -0.5]]) - np.array([[-1.5, -1.0, 0.0], [-0.5, -1.0, -0.25]]))
    kl *= mask  # k1 = old − ref on valid tokens
    rewards = np.array([[0.0, 1.0, 0.0], [0.0, 0.0, 0.5]]) - beta * kl
    costs = np.array([[0.0, 1.0, 0.0], [0.0, 0.0, 0.0]]) + beta * kl
    values = np.array([[0.2, 0.4, 0.0], [0.1, 0.3, 0.2]])
    cost_values = np.array([[0.5, 0.6, 0.0], [0.1, -0.2, 0.3]])
    a_r, ret_r = gae(rewards, values, mask, gamma, lam_gae)
    a_c, ret_c = gae(costs, cost_values, mask, gamma, lam_gae)
    np.testing.assert_allclose(batch["token_level_rewards"].numpy(), rewards, atol=1e-6)
    np.testing.assert_allclose(batch["returns"].numpy() * mask, ret_r * mask, atol=1e-6)
    np.testing.assert_allclose(batch["cost_returns"].numpy() * mask, ret_c * mask, atol=1e-6)
    np.testing.assert_allclose(batch["cost_advantages"].numpy() * mask, a_c * mask, atol=1e-6)
    np.testing.assert_allclose(batch["advantages"].numpy() * mask, (a_r - 2.0 * a_c) / 3.0 * mask, atol=1e-6)
    assert metrics["safe/lambda"] == pytest.approx(2.0)


def test_scores_and_costs_are_clipped():
    algo = SafeRLHF(SafeRLHFConfig(use_kl_in_reward=False, score_clip=0.5))
    batch = algo.compute_advantages(safe_batch(), {})
    assert float(batch["token_level_rewards"].max()) == pytest.approx(0.5)


def test_step_counts_the_delay_before_lambda_moves():
    algo = SafeRLHF(SafeRLHFConfig(lambda_update_delay_steps=1, cost_limit=0.0, lambda_lr=1.0))
    metrics: dict[str, float] = {}
    algo.update_multiplier(1, torch.tensor([1.0, 0.0]), metrics)
    assert algo.multiplier.value == pytest.approx(1.0)
    assert metrics["safe/episode_cost"] == pytest.approx(0.5) and metrics["safe/cost_violation"] == pytest.approx(0.5)
    algo.update_multiplier(2, torch.tensor([1.0, 1.0]), metrics)
    assert algo.multiplier.log_value == pytest.approx(0.75)  # J_c over 4 costs = 0.75, λ = 1, lr = 1


def test_state_dict_keeps_lambda_and_the_kl_coefficient():
    algo = SafeRLHF(SafeRLHFConfig())
    algo.update_multiplier(1, torch.tensor([1.0, 1.0]), {})
    state = algo.state_dict()
    fresh = SafeRLHF(SafeRLHFConfig())
    fresh.load_state_dict(state)
    assert fresh.multiplier.value == algo.multiplier.value != 1.0
    assert fresh.kl_ctrl.value == algo.kl_ctrl.value


@pytest.mark.parametrize(
    "field, value, message",
    [
        ("lambda_init", 0.0, "algorithm.lambda_init=0.0: must be in (0, inf)"),
        ("lambda_max", 0.5, "algorithm.lambda_max=0.5: must be >= lambda_init=1.0 and finite (or null)"),
        ("lambda_lr", -1.0, "algorithm.lambda_lr=-1.0: must be in [0, inf)"),
        ("episode_cost_window", 0, "algorithm.episode_cost_window=0: must be >= 1"),
        ("cost_limit", float("nan"), "algorithm.cost_limit=nan: must be in (-inf, inf)"),
        ("score_clip", 0.0, "algorithm.score_clip=0.0: must be > 0 (or null)"),
        ("cliprange_value", 0.0, "algorithm.cliprange_value=0.0: must be > 0"),  # a PPO setting, checked here too
    ],
)
def test_invalid_config_names_the_field(field, value, message):
    with pytest.raises(ValueError) as error:
        SafeRLHFConfig(**{field: value})
    assert str(error.value) == message
