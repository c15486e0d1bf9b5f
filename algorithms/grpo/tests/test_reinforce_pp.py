"""REINFORCE++ / REINFORCE++-baseline advantages vs numpy, KL-in-reward, registration, end to end."""

import numpy as np
import pytest
import torch
from rlloom.batch import Batch
from rlloom_algokit.losses import kl_penalized_rewards
from rlloom_grpo import (
    ReinforcePP,
    ReinforcePPBaselineConfig,
    ReinforcePPConfig,
    reinforce_pp_advantages,
    reinforce_pp_baseline_advantages,
)
from rlloom_trainer.testing import train_tiny, training_rows

from family_checks import assert_reward_rises, built_member

REWARDS = np.array([[0.0, 0.0, 1.0, 0.0], [0.1, -0.2, 0.3, 5.0], [0.0, 0.0, 0.0, 0.0], [2.0, 0.0, 0.0, 0.0]])
MASK = np.array([[1, 1, 1, 0], [1, 1, 1, 1], [0, 0, 0, 0], [1, 0, 0, 0]])


def whiten(values, mask):
    """numpy: (x − mean) / sqrt(unbiased var + 1e-8) over masked entries, 0 elsewhere."""
    picked = values[mask.astype(bool)]
    return np.where(mask.astype(bool), (values - picked.mean()) / np.sqrt(picked.var(ddof=1) + 1e-8), 0.0)


def test_reinforce_pp_whitens_discounted_returns():
    gamma = 0.9
    returns = np.zeros_like(REWARDS)
    for i in range(4):
        running = 0.0
        for t in reversed(range(int(MASK[i].sum()))):
            running = REWARDS[i, t] + gamma * running
            returns[i, t] = running
    out = reinforce_pp_advantages(torch.tensor(REWARDS), torch.tensor(MASK), gamma)
    np.testing.assert_allclose(out.numpy(), whiten(returns, MASK), atol=1e-6)


def test_reinforce_pp_baseline_centres_in_groups_then_whitens():
    uids = ["a", "a", "b", "b"]
    totals = np.array([1.0, 5.2, 0.0, 2.0])  # row sums of REWARDS by hand
    centred = totals - np.array([3.1, 3.1, 1.0, 1.0])  # group means: a = (1 + 5.2)/2, b = (0 + 2)/2
    out = reinforce_pp_baseline_advantages(torch.tensor(REWARDS), uids, torch.tensor(MASK))
    np.testing.assert_allclose(out.numpy(), whiten(centred[:, None] * MASK, MASK), atol=1e-6)


def test_all_equal_rewards_give_zero_advantages():
    rewards = torch.tensor([[0.0, 1.0], [0.0, 1.0]])
    out = reinforce_pp_baseline_advantages(rewards, [0, 0], torch.ones(2, 2))
    assert torch.equal(out, torch.zeros(2, 2))


def test_kl_penalty_in_the_reward():
    scores = torch.tensor([[0.0, 1.0], [0.0, 0.0]])
    log_probs = torch.tensor([[-1.0, -2.0], [-0.5, -9.0]])
    ref = torch.tensor([[-1.5, -1.0], [-0.5, -9.0]])
    mask = torch.tensor([[1, 1], [1, 0]])
    out, _ = kl_penalized_rewards(scores, log_probs, ref, mask, coef=0.1, estimator="k1")
    # k1 = log π − log π_ref: (0.5, −1.0) and (0, padding)
    torch.testing.assert_close(out, torch.tensor([[-0.05, 1.1], [0.0, 0.0]]))


def test_kl_in_reward_uses_old_or_rollout_log_probs_and_needs_a_reference():
    algorithm = ReinforcePP(ReinforcePPConfig(use_kl_in_reward=True, kl_coef=1.0))
    assert algorithm.needs_reference and not ReinforcePP(ReinforcePPConfig()).needs_reference
    batch = Batch({"token_level_scores": torch.tensor([[0.0, 1.0]]), "response_mask": torch.ones(1, 2),
                   "rollout_log_probs": torch.tensor([[-1.0, -1.0]]), "ref_log_probs": torch.tensor([[-2.0, -1.0]])})
    torch.testing.assert_close(algorithm.token_level_rewards(batch), torch.tensor([[-1.0, 1.0]]))
    batch["old_log_probs"] = torch.tensor([[-2.0, -3.0]])
    torch.testing.assert_close(algorithm.token_level_rewards(batch), torch.tensor([[0.0, 3.0]]))
    with pytest.raises(ValueError, match="algorithm.kl_penalty=k9: must be one of k1, kl, "):
        ReinforcePPConfig(kl_penalty="k9")


def test_a_one_update_step_computes_old_log_probs_only_when_the_rollout_reported_none():
    batch = Batch({"response_mask": torch.ones(2, 2)})
    with_rollout = Batch({"response_mask": torch.ones(2, 2), "rollout_log_probs": torch.zeros(2, 2)})
    kl_in_reward = ReinforcePP(ReinforcePPConfig(use_kl_in_reward=True))
    assert kl_in_reward.needs_old_log_probs(batch, num_prompts=2)  # e.g. vLLM with top-k: no rollout log-probs
    assert not kl_in_reward.needs_old_log_probs(with_rollout, num_prompts=2)
    assert not ReinforcePP(ReinforcePPConfig()).needs_old_log_probs(batch, num_prompts=2)  # no KL in the reward
    assert ReinforcePP(ReinforcePPConfig(ppo_epochs=2)).needs_old_log_probs(with_rollout, num_prompts=2)


def test_entry_point_registers_both_names():
    for name, config in (("reinforce_pp", ReinforcePPConfig), ("reinforce_pp_baseline", ReinforcePPBaselineConfig)):
        algorithm, registry = built_member(name, config)
        assert type(algorithm) is ReinforcePP  # the baseline variant differs only in its config's estimator
        assert algorithm.estimator is registry.get("advantage_estimator", name).factory


@pytest.mark.slow
@pytest.mark.parametrize("name", ["reinforce_pp", "reinforce_pp_baseline"])
def test_reward_rises(tmp_path_factory, name):
    rows = train_tiny(tmp_path_factory.mktemp(f"{name}-run"), f"algorithm={name}",
                      cache_dir=tmp_path_factory.mktemp("cache"))
    scores = [row["critic/score/mean"] for row in training_rows(rows)]
    assert_reward_rises(scores)
