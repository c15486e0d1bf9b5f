"""PPOConfig validation, the plugin entry, and the step's advantage stage on a hand-made batch."""

from __future__ import annotations

import subprocess
import sys
import textwrap

import numpy as np
import pytest
import torch

from rlloom import Batch
from rlloom.plugins.registry import Registry
from rlloom_algokit.losses import mini_batch_stats
from rlloom_algokit import PPO, PPOConfig


def test_plugin_registers_ppo():
    component = Registry().get("algorithm", "ppo")
    assert component.factory is PPO and component.config is PPOConfig
    assert component.distribution == "rlloom-ppo"


def test_ppo_builds_and_trains_without_the_grpo_plugin():
    # rlloom-grpo made unimportable: PPO's policy loss is the core's (rlloom_algokit), found in the registry
    done = subprocess.run([sys.executable, "-c", textwrap.dedent("""
        import sys
        sys.modules["rlloom_grpo"] = None
        import torch
        from rlloom import Batch
        from rlloom_algokit.losses import mini_batch_stats
        from rlloom_algokit import PPO, PPOConfig
        batch = Batch({"advantages": torch.tensor([[1.0, -2.0]]), "response_mask": torch.ones(1, 2)})
        loss_fn = PPO(PPOConfig()).policy_loss_fn
        loss, _ = loss_fn(batch, {"log_probs": torch.zeros(1, 2)}, mini_batch_stats(torch.ones(1, 2)))
        print(round(loss.item(), 6))
    """)], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == ["0.5"]  # on-policy ratio 1: token-mean of −A = (−1 + 2) / 2


def test_defaults_and_needs():
    cfg = PPOConfig()
    assert (cfg.n, cfg.gamma, cfg.lam, cfg.clip_ratio_c, cfg.cliprange_value) == (1, 1.0, 1.0, 3.0, 0.5)
    assert PPO(cfg).needs_critic and not PPO(cfg).needs_reference
    assert PPO(PPOConfig(use_kl_in_reward=True)).needs_reference
    assert PPO(PPOConfig(use_kl_loss=True)).needs_reference


@pytest.mark.parametrize(
    "field, value, message",
    [
        ("lam", 1.5, "in [0, 1]"),
        ("cliprange_value", 0.0, "> 0"),
        ("kl_ctrl_type", "pid", "one of fixed, adaptive."),
        ("kl_penalty", "k9", "one of k1, kl, abs, k2, mse, k3, low_var_kl."),
        ("critic_warmup", -1, ">= 0"),
        ("clip_ratio_c", 0.5, "> 1 (or null)"),
        ("loss_agg_mode", "sum", "one of token-mean, seq-mean-token-sum, seq-mean-token-mean, seq-mean-token-sum-norm."),
    ],
)
def test_invalid_config_names_the_field(field, value, message):
    with pytest.raises(ValueError) as error:
        PPOConfig(**{field: value})
    assert str(error.value) == f"algorithm.{field}={value}: must be {message}"


def test_policy_loss_uses_the_ppo_clip_settings():
    # one token, A = −1, ratio e^2 ≈ 7.39: the dual clip caps the loss at −A·c = c
    cfg = PPOConfig(clip_ratio_c=3.0)
    batch = Batch({
        "advantages": torch.tensor([[-1.0]]),
        "old_log_probs": torch.tensor([[-3.0]]),
        "response_mask": torch.tensor([[1]]),
    })
    loss, metrics = PPO(cfg).policy_loss_fn(batch, {"log_probs": torch.tensor([[-1.0]])}, mini_batch_stats(batch["response_mask"]))
    assert float(loss) == pytest.approx(3.0)
    assert metrics["pg_clipfrac_lower"] == 1.0


def advantage_batch():
    return Batch({
        "token_level_scores": torch.tensor([[0.0, 1.0, 0.0], [0.0, 0.0, 0.5]]),
        "values": torch.tensor([[0.2, 0.4, 0.0], [0.1, 0.3, 0.2]]),
        "old_log_probs": torch.tensor([[-1.0, -2.0, 0.0], [-0.5, -0.5, -0.5]]),
        "ref_log_probs": torch.tensor([[-1.5, -1.0, 0.0], [-0.5, -1.0, -0.25]]),
        "response_mask": torch.tensor([[1, 1, 0], [1, 1, 1]]),
    })


def test_advantage_stage_applies_the_adaptive_kl_penalty_and_logs():
    algo = PPO(PPOConfig(use_kl_in_reward=True, kl_coef=0.1, kl_ctrl_type="adaptive", kl_target=0.1,
                         kl_horizon=20))
    metrics: dict[str, float] = {}
    batch = algo.compute_advantages(advantage_batch(), metrics)
    d = np.array([[0.5, -1.0, 0.0], [0.0, 0.5, -0.25]])  # old − ref (k1), masked
    rewards = np.array([[0.0, 1.0, 0.0], [0.0, 0.0, 0.5]]) - 0.1 * d
    np.testing.assert_allclose(batch["token_level_rewards"].numpy(), rewards, atol=1e-6)
    kl = np.mean([d[0, :2].mean(), d[1].mean()])  # (−0.25 + 0.0833) / 2
    assert metrics["actor/kl_coef"] == pytest.approx(0.1)
    assert metrics["actor/reward_kl_penalty"] == pytest.approx(kl, rel=1e-5)
    # KL / target − 1 < −0.2: β ← 0.1 · (1 − 0.2 · 2 / 20)
    assert algo.kl_ctrl.value == pytest.approx(0.1 * 0.98)
    # returns (γ = λ = 1) are the reward-to-go
    to_go = np.flip(np.cumsum(np.flip(rewards, 1), 1), 1) * np.array([[1, 1, 0], [1, 1, 1]])
    np.testing.assert_allclose(batch["returns"].numpy(), to_go, atol=1e-6)
    assert metrics["critic/returns/max"] == pytest.approx(to_go.max(), rel=1e-6)
    assert metrics["critic/values/mean"] == pytest.approx((0.2 + 0.4 + 0.1 + 0.3 + 0.2) / 5, rel=1e-6)
    assert metrics["critic/rewards/mean"] == pytest.approx(rewards.sum(1).mean(), rel=1e-6)
    keep = np.array([[1, 1, 0], [1, 1, 1]], dtype=bool)
    residual = (to_go - batch["values"].numpy())[keep]
    assert metrics["critic/vf_explained_var"] == pytest.approx(1 - residual.var() / to_go[keep].var(), rel=1e-5)
    metrics = {}
    algo.compute_advantages(advantage_batch(), metrics)
    assert metrics["actor/kl_coef"] == pytest.approx(0.098)  # the controller's state carries over


def test_without_kl_in_reward_rewards_are_the_scores():
    metrics: dict[str, float] = {}
    batch = PPO(PPOConfig()).compute_advantages(advantage_batch(), metrics)
    assert torch.equal(batch["token_level_rewards"], batch["token_level_scores"])
    assert "actor/kl_coef" not in metrics
