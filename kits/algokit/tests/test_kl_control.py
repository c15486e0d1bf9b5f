"""KL coefficient controllers and the KL penalty in the reward, against hand computations."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from rlloom_algokit.losses import aggregate, kl_penalized_rewards
from rlloom_algokit import AdaptiveKLController, FixedKLController


def test_fixed_controller_keeps_its_coefficient():
    ctrl = FixedKLController(0.05)
    for kl in (0.0, 1.0, 100.0):
        ctrl.update(kl, n_steps=64)
    assert ctrl.value == 0.05


def test_adaptive_controller_follows_the_formula_over_updates():
    ctrl = AdaptiveKLController(0.1, target=0.05, horizon=100)
    expected = 0.1
    # KL / target − 1 = 1 (clipped to 0.2), −0.2, 0.1, −1 (clipped to −0.2); 10 samples each
    for kl, error in ((0.1, 0.2), (0.04, -0.2), (0.055, 0.1), (0.0, -0.2)):
        ctrl.update(kl, n_steps=10)
        expected *= 1 + error * 10 / 100
        assert ctrl.value == pytest.approx(expected, rel=1e-12)
    assert expected == pytest.approx(0.1 * 1.02 * 0.98 * 1.01 * 0.98, rel=1e-12)


def test_adaptive_controller_rejects_a_bad_target():
    with pytest.raises(ValueError, match="target > 0"):
        AdaptiveKLController(0.1, target=0.0, horizon=10)


@pytest.mark.parametrize("estimator", ["kl", "low_var_kl"])
def test_kl_penalty_in_reward_matches_numpy(estimator):
    scores = np.array([[0.0, 0.0, 1.0, 0.0], [0.0, 0.5, 0.0, 0.0], [0.0, 0.0, 0.0, 0.0]], dtype=np.float32)
    old = np.array([[-1.0, -0.5, -2.0, 0.0], [-0.1, -0.2, 0.0, 0.0], [0.0, 0.0, 0.0, 0.0]], dtype=np.float32)
    ref = np.array([[-1.5, -0.5, -1.0, 7.0], [-0.3, -0.1, 9.0, 9.0], [3.0, 3.0, 3.0, 3.0]], dtype=np.float32)
    mask = np.array([[1, 1, 1, 0], [1, 1, 0, 0], [0, 0, 0, 0]])
    d = old - ref
    kl = d if estimator == "kl" else np.clip(np.exp(-d) + d - 1, -10, 10)
    kl = kl * mask
    beta = 0.2
    rewards, token_kl = kl_penalized_rewards(
        torch.tensor(scores), torch.tensor(old), torch.tensor(ref), torch.tensor(mask), beta, estimator
    )
    batch_kl = float(aggregate(token_kl, torch.tensor(mask), "seq-mean-token-mean"))  # what PPO feeds β
    np.testing.assert_allclose(rewards.numpy(), scores - beta * kl, atol=1e-6)
    per_response = [kl[0, :3].mean(), kl[1, :2].mean()]  # the empty response is left out
    assert batch_kl == pytest.approx(float(np.mean(per_response)), rel=1e-5)


def test_ppo_keeps_the_adaptive_kl_coefficient_across_a_resume():
    from rlloom_algokit.ppo import PPO
    from rlloom_algokit import PPOConfig

    cfg = PPOConfig(use_kl_in_reward=True, kl_ctrl_type="adaptive", kl_coef=0.2, kl_target=0.1, kl_horizon=10)
    before = PPO(cfg)
    before.kl_ctrl.update(0.3, n_steps=4)  # KL/target − 1 = 2 → clipped to 0.2: β = 0.2·(1 + 0.2·4/10)
    assert before.kl_ctrl.value == pytest.approx(0.2 * 1.08)
    after = PPO(cfg)
    after.load_state_dict(before.state_dict())
    assert after.kl_ctrl.value == pytest.approx(0.2 * 1.08)
