"""CISPO's loss (value and gradient by hand), defaults, registration, and a tiny end-to-end run."""

import numpy as np
import pytest
import torch
from rlloom.batch import Batch
from rlloom_algokit.config import PolicyLossConfig
from rlloom_algokit.losses import mini_batch_stats
from rlloom_algokit.policy_loss import make_policy_loss_fn
from rlloom_algokit import GRPO
from rlloom_grpo import CISPOConfig
from rlloom_trainer.testing import train_tiny, training_rows

from family_checks import assert_reward_rises, built_member


def test_loss_value_and_gradient_by_hand():
    # Ratios e^0.5 = 1.6487 (clipped to 1.2), e^-0.1 = 0.9048, e^-1 = 0.3679 (clipped to 0.8), e^0.
    cfg = CISPOConfig(clip_ratio_low=0.2, clip_ratio_high=0.2)
    lp = np.array([[-1.0, -2.0], [-0.5, -3.0]])
    old = lp - np.array([[0.5, -0.1], [-1.0, 0.0]])
    adv = np.array([[2.0, 2.0], [-1.0, 0.0]])
    mask = np.array([[1, 1], [1, 0]])
    weight = np.array([[1.2, np.exp(-0.1)], [0.8, 1.0]])
    expected = (-weight * adv * lp * mask).sum() / 3  # token-mean over the 3 real tokens
    expected_grad = -weight * adv * mask / 3  # the weight carries no gradient
    log_probs = torch.tensor(lp, requires_grad=True)
    batch = Batch({"old_log_probs": torch.tensor(old), "advantages": torch.tensor(adv),
                   "response_mask": torch.tensor(mask)})
    loss, metrics = GRPO(cfg).loss_fn(batch, {"log_probs": log_probs}, mini_batch_stats(torch.tensor(mask)))
    loss.backward()
    assert loss.item() == pytest.approx(expected, rel=1e-12)
    np.testing.assert_allclose(log_probs.grad.numpy(), expected_grad, rtol=1e-12)
    assert metrics["pg_clipfrac"] == pytest.approx(2 / 3)  # tokens (0, 0) and (1, 0)
    assert metrics["pg_clipfrac_lower"] == 0.0
    # PPO's clipped surrogate gives the clipped token (0, 0) (A > 0, ρ > 1.2) no gradient; CISPO does.
    ppo_log_probs = torch.tensor(lp, requires_grad=True)
    ppo_loss, _ = make_policy_loss_fn(PolicyLossConfig(clip_ratio_low=0.2, clip_ratio_high=0.2))(
        batch, {"log_probs": ppo_log_probs}, mini_batch_stats(torch.tensor(mask)))
    ppo_loss.backward()
    assert ppo_log_probs.grad[0, 0] == 0 and log_probs.grad[0, 0] == pytest.approx(-1.2 * 2 / 3)


def test_on_policy_update_is_reinforce_with_group_advantages():
    log_probs = torch.tensor([[-1.0, -3.0]], requires_grad=True)
    mask = torch.ones(1, 2)
    batch = Batch({"advantages": torch.tensor([[2.0, 2.0]]), "response_mask": mask})
    loss, _ = GRPO(CISPOConfig()).loss_fn(batch, {"log_probs": log_probs}, mini_batch_stats(mask))
    loss.backward()
    assert loss.item() == pytest.approx(-(2.0 * -1.0 + 2.0 * -3.0) / 2)  # −A·log π, token-mean
    torch.testing.assert_close(log_probs.grad, torch.tensor([[-1.0, -1.0]]))


def test_defaults_and_entry_point():
    cfg = CISPOConfig()
    assert (cfg.clip_ratio_low, cfg.clip_ratio_high, cfg.clip_ratio_c, cfg.loss_agg_mode, cfg.policy_loss) == (
        1.0, 4.0, None, "token-mean", "cispo")
    assert type(built_member("cispo", CISPOConfig)[0]) is GRPO  # a preset: GRPO with this config


@pytest.fixture(scope="module")
def scores(tmp_path_factory):
    # two optimizer steps per step (mini-batches of 2 prompts), so the weights leave 1 and can clip
    rows = train_tiny(tmp_path_factory.mktemp("cispo-run"), "algorithm=cispo", "algorithm.ppo_mini_batch_size=2",
                      "algorithm.clip_ratio_high=0.1", cache_dir=tmp_path_factory.mktemp("cache"))
    return training_rows(rows)


@pytest.mark.slow
def test_cispo_reward_rises(scores):
    means = [row["critic/score/mean"] for row in scores]
    assert_reward_rises(means)
