"""GSPO's loss function (value and gradient vs numpy), defaults, registration, end to end."""

import numpy as np
import pytest
import torch
from rlloom.batch import Batch
from rlloom_algokit.losses import mini_batch_stats
from rlloom_algokit.policy_loss import make_policy_loss_fn
from rlloom_algokit import GRPO
from rlloom_grpo import GSPOConfig
from rlloom_trainer.testing import train_tiny, training_rows

from family_checks import assert_reward_rises, built_member


def test_loss_value_and_gradient_match_the_sequence_formula():
    cfg = GSPOConfig(clip_ratio_low=0.05, clip_ratio_high=0.1)
    lp = np.array([[-1.0, -2.0, -0.5], [-0.3, -0.7, -4.0], [-1.0, -1.0, -1.0], [-1.0, -1.0, -1.0]])
    old = np.array([[-1.03, -2.0, 0.0], [-0.3, -0.4, -4.3], [-1.0, -1.6, -1.0], [0.0, 0.0, 0.0]])
    mask = np.array([[1, 1, 0], [1, 1, 1], [1, 1, 1], [0, 0, 0]])
    adv = np.array([2.0, -1.0, 1.0, 5.0])
    # s_i = exp(mean over the response of lp − old): 1.0151, 1, 1.2214 (clipped at 1.1 with A > 0)
    n = mask.sum(1)
    s = np.exp(((lp - old) * mask).sum(1) / np.maximum(n, 1))
    unclipped, clipped = -adv * s, -adv * np.clip(s, 1 - 0.05, 1 + 0.1)
    rows = n > 0
    expected_loss = np.maximum(unclipped, clipped)[rows].mean()
    grad_rows = np.where(unclipped >= clipped, -adv * s / np.maximum(n, 1), 0.0) / rows.sum()
    log_probs = torch.tensor(lp, requires_grad=True)
    m = torch.tensor(mask)
    batch = Batch({"old_log_probs": torch.tensor(old), "advantages": torch.tensor(adv)[:, None] * m,
                   "response_mask": m})
    loss, metrics = make_policy_loss_fn(cfg)(batch, {"log_probs": log_probs}, mini_batch_stats(m))
    loss.backward()
    assert abs(loss.item() - expected_loss) < 1e-12
    np.testing.assert_allclose(log_probs.grad.numpy(), grad_rows[:, None] * mask, atol=1e-12)
    assert metrics["pg_clipfrac"] == pytest.approx(3 / 8)  # row 2's 3 of the 8 response tokens
    assert np.allclose(batch["old_log_probs"].numpy(), old)  # the caller's batch is untouched


def test_without_old_log_probs_the_ratio_is_one():
    log_probs = torch.tensor([[-1.0, -3.0]], requires_grad=True)
    m = torch.ones(1, 2)
    batch = Batch({"advantages": torch.tensor([[2.0, 2.0]]), "response_mask": m})
    loss, _ = make_policy_loss_fn(GSPOConfig())(batch, {"log_probs": log_probs}, mini_batch_stats(m))
    loss.backward()
    assert loss.item() == -2.0
    torch.testing.assert_close(log_probs.grad, torch.tensor([[-1.0, -1.0]]))  # −A · 1 / 2 tokens


def test_defaults_and_entry_point():
    cfg = GSPOConfig()
    assert (cfg.clip_ratio_low, cfg.clip_ratio_high, cfg.loss_agg_mode, cfg.policy_loss) == (
        3e-4, 4e-4, "seq-mean-token-mean", "gspo")
    assert type(built_member("gspo", GSPOConfig)[0]) is GRPO  # a preset: GRPO with this config


@pytest.fixture(scope="module")
def scores(tmp_path_factory):
    # two optimizer steps per step (mini-batches of 2 prompts), so the sequence ratio leaves 1 and clips
    rows = train_tiny(tmp_path_factory.mktemp("gspo-run"), "algorithm=gspo", "algorithm.ppo_mini_batch_size=2",
                      cache_dir=tmp_path_factory.mktemp("cache"))
    return training_rows(rows)


@pytest.mark.slow
def test_gspo_reward_rises_and_clips(scores):
    means = [row["critic/score/mean"] for row in scores]
    assert_reward_rises(means)
    assert any(row["actor/pg_clipfrac"] > 0 for row in scores)
