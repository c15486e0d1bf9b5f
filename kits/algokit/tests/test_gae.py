"""GAE against a per-row numpy reference that drops masked positions and runs the textbook recursion."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from rlloom_algokit import gae_advantages


def numpy_gae(rewards, values, mask, gamma, lam):
    """Per row: keep the masked-in positions only, A_t = δ_t + γλA_{t+1} with V and A after the last
    kept token 0; scatter back (0 elsewhere). Returns (raw advantages, returns)."""
    advantages = np.zeros_like(rewards)
    for row in range(rewards.shape[0]):
        kept = np.flatnonzero(mask[row])
        r, v = rewards[row, kept], values[row, kept]
        a = np.zeros(len(kept))
        following_a, following_v = 0.0, 0.0
        for i in reversed(range(len(kept))):
            a[i] = r[i] + gamma * following_v - v[i] + gamma * lam * following_a
            following_a, following_v = a[i], v[i]
        advantages[row, kept] = a
    returns = (advantages + values) * mask
    return advantages, returns


def numpy_whiten(x, mask):
    picked = x[mask.astype(bool)]
    return (x - picked.mean()) / np.sqrt(picked.var(ddof=1) + 1e-8) * mask


def case():
    rewards = np.array([
        [0.0, 0.0, 0.0, 1.0, 0.0],
        [0.5, 0.0, -1.0, 0.0, 0.0],   # a hole at position 1
        [3.0, 3.0, 3.0, 3.0, 3.0],    # empty response: ignored whatever sits there
        [0.0, 2.0, 0.0, 0.0, 0.5],
    ])
    values = np.array([
        [0.1, 0.2, 0.3, 0.4, 9.0],
        [-0.5, 7.0, 0.25, 0.0, 0.0],
        [1.0, 1.0, 1.0, 1.0, 1.0],
        [0.3, -0.2, 0.6, 0.1, 0.05],
    ])
    mask = np.array([
        [1, 1, 1, 1, 0],
        [1, 0, 1, 1, 0],
        [0, 0, 0, 0, 0],
        [1, 1, 1, 1, 1],
    ])
    return rewards, values, mask


@pytest.mark.parametrize("gamma, lam", [(1.0, 1.0), (0.9, 0.8), (0.5, 0.0)])
def test_gae_matches_numpy_with_masks_and_an_empty_response(gamma, lam):
    rewards, values, mask = case()
    raw, expected_returns = numpy_gae(rewards, values, mask, gamma, lam)
    advantages, returns = gae_advantages(
        torch.tensor(rewards, dtype=torch.float32), torch.tensor(values, dtype=torch.float32),
        torch.tensor(mask), gamma, lam,
    )
    assert advantages.dtype == returns.dtype == torch.float32
    np.testing.assert_allclose(returns.numpy(), expected_returns, atol=1e-6)
    np.testing.assert_allclose(advantages.numpy(), numpy_whiten(raw, mask), atol=1e-5)
    assert torch.all(advantages[2] == 0) and torch.all(returns[2] == 0)


def test_gae_by_hand_for_gamma_lambda_one():
    # γ = λ = 1: A_t = (Σ_{t'≥t} r_t') − V_t, returns = Σ_{t'≥t} r_t' (the reward-to-go).
    rewards = torch.tensor([[0.0, 0.0, 1.0], [0.0, 2.0, 0.0]])
    values = torch.tensor([[0.5, 0.25, 0.75], [1.0, 0.5, 0.0]])
    mask = torch.tensor([[1, 1, 1], [1, 1, 0]])
    _, returns = gae_advantages(rewards, values, mask)
    torch.testing.assert_close(returns, torch.tensor([[1.0, 1.0, 1.0], [2.0, 2.0, 0.0]]))


def test_whitening_gives_zero_mean_unit_variance_over_tokens():
    rewards, values, mask = case()
    advantages, _ = gae_advantages(torch.tensor(rewards), torch.tensor(values), torch.tensor(mask), 0.9, 0.8)
    picked = advantages[torch.tensor(mask).bool()].double()
    assert float(picked.mean()) == pytest.approx(0.0, abs=1e-6)
    assert float(picked.var(unbiased=True)) == pytest.approx(1.0, abs=1e-5)


def test_a_single_token_batch_is_not_whitened():
    advantages, returns = gae_advantages(torch.tensor([[2.0, 0.0]]), torch.tensor([[0.5, 0.0]]), torch.tensor([[1, 0]]))
    torch.testing.assert_close(advantages, torch.tensor([[1.5, 0.0]]))
    torch.testing.assert_close(returns, torch.tensor([[2.0, 0.0]]))


def test_gae_rejects_mismatched_shapes():
    with pytest.raises(ValueError, match="same shape"):
        gae_advantages(torch.zeros(2, 3), torch.zeros(2, 4), torch.ones(2, 3))
