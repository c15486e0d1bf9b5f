"""discounted_returns and sequence_log_ratio against values computed by hand / with numpy."""

import numpy as np
import pytest
import torch

from rlloom_algokit.losses import aggregate, discounted_returns, ppo_clip_loss, sequence_log_ratio


def test_discounted_returns_by_hand():
    rewards = torch.tensor([[1.0, 0.0, 2.0, 9.0], [0.5, 0.5, 0.0, 0.0], [7.0, 7.0, 7.0, 7.0]])
    mask = torch.tensor([[1, 1, 1, 0], [1, 1, 1, 1], [0, 0, 0, 0]])
    # row 0, γ = 0.5: G2 = 2, G1 = 0 + 0.5·2 = 1, G0 = 1 + 0.5·1 = 1.5; the 9 on padding is ignored.
    # row 1: G3 = 0, G2 = 0, G1 = 0.5, G0 = 0.5 + 0.25 = 0.75. Row 2 is empty: all 0.
    expected = torch.tensor([[1.5, 1.0, 2.0, 0.0], [0.75, 0.5, 0.0, 0.0], [0.0, 0.0, 0.0, 0.0]])
    torch.testing.assert_close(discounted_returns(rewards, mask, gamma=0.5), expected)


def test_discounted_returns_gamma_one_is_reward_to_go():
    rng = np.random.default_rng(0)
    rewards = rng.normal(size=(3, 6))
    lengths = [6, 2, 4]
    mask = np.array([[1] * n + [0] * (6 - n) for n in lengths])
    expected = np.zeros_like(rewards)
    for i, n in enumerate(lengths):
        for t in range(n):
            expected[i, t] = rewards[i, t:n].sum()
    out = discounted_returns(torch.tensor(rewards), torch.tensor(mask), gamma=1.0)
    np.testing.assert_allclose(out.numpy(), expected, atol=1e-12)


def test_discounted_returns_rejects_bad_gamma():
    with pytest.raises(ValueError, match="gamma must be in"):
        discounted_returns(torch.zeros(1, 2), torch.ones(1, 2), gamma=1.5)


def test_sequence_log_ratio_value_and_gradient():
    log_probs = torch.tensor([[-1.0, -2.0, -0.5], [-0.3, -0.7, -4.0], [-1.0, -1.0, -1.0]], requires_grad=True)
    old = torch.tensor([[-1.2, -1.9, 0.0], [-0.4, -0.3, -1.0], [-2.0, -2.0, -2.0]])
    mask = torch.tensor([[1, 1, 0], [1, 1, 1], [0, 0, 0]])
    out = sequence_log_ratio(log_probs, old, mask)
    # row 0: mean(0.2, −0.1) = 0.05 on its 2 tokens; row 1: mean(0.1, −0.4, −3.0) = −1.1; row 2 empty.
    expected = torch.tensor([[0.05, 0.05, 0.0], [-1.1, -1.1, -1.1], [0.0, 0.0, 0.0]])
    torch.testing.assert_close(out, expected)
    weights = torch.tensor([[1.0, 2.0, 3.0], [4.0, 5.0, 6.0], [7.0, 8.0, 9.0]])
    (out * weights).sum().backward()
    # d log s_it / d log π_jt' = 1 if same token, else 0 (the mean is a stop-gradient constant).
    torch.testing.assert_close(log_probs.grad, weights * mask)


def test_gspo_sequence_loss_matches_numpy():
    """PPO clip on sequence_log_ratio (old = 0), seq-mean-token-mean: loss and gradient of
    mean_i max(−A_i s_i, −A_i clip(s_i, 1 − εl, 1 + εh)) computed in numpy."""
    lp = np.array([[-1.0, -2.0, -0.5, -1.0], [-0.3, -0.7, -4.0, -1.0], [-0.2, -0.2, -0.2, -0.2]])
    old = np.array([[-1.001, -2.0, -0.5, 0.0], [-0.3, -0.69, -4.0, 0.0], [-0.2, -0.2, -0.2, -0.2]])
    mask = np.array([[1, 1, 1, 0], [1, 1, 1, 0], [1, 1, 1, 1]])
    adv = np.array([1.0, -2.0, 0.5])
    eps_low, eps_high = 3e-4, 4e-4
    n = mask.sum(1)
    log_s = ((lp - old) * mask).sum(1) / n
    s = np.exp(log_s)
    unclipped, clipped = -adv * s, -adv * np.clip(s, 1 - eps_low, 1 + eps_high)
    expected_loss = np.maximum(unclipped, clipped).mean()
    # gradient: where the unclipped term is the max, d(−A s)/d lp_t = −A s / n_i, else 0; / 3 rows.
    active = unclipped >= clipped
    expected_grad = (np.where(active, -adv * s / n, 0.0) / 3)[:, None] * mask
    log_probs = torch.tensor(lp, requires_grad=True)
    m = torch.tensor(mask)
    ratio = sequence_log_ratio(log_probs, torch.tensor(old), m)
    terms = ppo_clip_loss(ratio, torch.zeros_like(ratio), torch.tensor(adv)[:, None] * m, m, eps_low, eps_high)
    loss = aggregate(terms.loss, m, "seq-mean-token-mean")
    loss.backward()
    assert abs(loss.item() - expected_loss) < 1e-12
    np.testing.assert_allclose(log_probs.grad.numpy(), expected_grad, atol=1e-12)
    # row 0: s = e^(0.001/3) inside the clip range; row 1: s = e^(−0.01/3) < 1 − 3e-4 with A < 0,
    # clipped (no gradient); row 2: s = 1.
    assert active.tolist() == [True, False, True]
