"""rlloom_algokit.losses against hand-worked values and independent numpy formulas."""

import math

import numpy as np
import pytest
import torch

from rlloom_algokit.losses import (
    AGG_MODES,
    aggregate,
    kl_estimate,
    masked_mean,
    masked_whiten,
    mini_batch_stats,
    ppo_clip_loss,
)
from rlloom.types import MiniBatchStats

# A [3, 4] loss with a ragged mask; row 1 is empty. Masked-out positions hold nan/inf, which must
# not leak into any result.
VALUES = torch.tensor(
    [
        [1.0, 2.0, 3.0, float("nan")],
        [5.0, 6.0, float("inf"), 8.0],
        [9.0, 10.0, 11.0, 12.0],
    ]
)
MASK = torch.tensor([[1, 1, 1, 0], [0, 0, 0, 0], [1, 1, 0, 0]])
# Row sums over the mask: S = [6, 0, 19]; token counts n = [3, 0, 2]; 5 tokens, 3 rows, 2 non-empty.
EXPECTED = {
    "token-mean": 25 / 5,
    "seq-mean-token-sum": 25 / 3,
    "seq-mean-token-mean": (6 / 3 + 19 / 2) / 2,  # the empty row is excluded
    "seq-mean-token-sum-norm": 25 / (3 * 4),
}


def test_modes_constant_covers_every_mode():
    assert set(AGG_MODES) == set(EXPECTED)


@pytest.mark.parametrize("mode", sorted(EXPECTED))
def test_aggregate_hand_values(mode):
    result = aggregate(VALUES, MASK, mode)
    assert result.dim() == 0
    assert math.isclose(result.item(), EXPECTED[mode], rel_tol=1e-6)


def test_mini_batch_stats_counts():
    assert mini_batch_stats(MASK) == MiniBatchStats(
        num_tokens=5, num_seqs=3, num_nonempty_seqs=2, max_response_len=4
    )


def test_aggregate_unknown_mode_lists_choices():
    with pytest.raises(ValueError, match="token-mean.*seq-mean-token-sum-norm"):
        aggregate(VALUES, MASK, "sum")


def test_aggregate_rejects_shape_mismatch():
    with pytest.raises(ValueError, match="same shape"):
        aggregate(VALUES, MASK[:, :3], "token-mean")


def test_aggregate_all_empty_is_zero():
    for mode in AGG_MODES:
        assert aggregate(torch.ones(2, 3), torch.zeros(2, 3), mode).item() == 0.0


def _numpy_aggregate(values: np.ndarray, mask: np.ndarray, mode: str) -> float:
    """The ALGORITHMS.md table, written independently over the whole batch."""
    masked = np.where(mask > 0, values, 0.0)
    row_sums = masked.sum(axis=1)
    row_counts = mask.sum(axis=1)
    if mode == "token-mean":
        return masked.sum() / mask.sum()
    if mode == "seq-mean-token-sum":
        return row_sums.mean()
    if mode == "seq-mean-token-mean":
        nonempty = row_counts > 0
        return (row_sums[nonempty] / row_counts[nonempty]).mean()
    return masked.sum() / (values.shape[0] * values.shape[1])


@pytest.mark.parametrize("mode", AGG_MODES)
def test_micro_batches_with_global_stats_sum_to_whole_batch(mode):
    rng = np.random.default_rng(0)
    values = rng.normal(size=(6, 5))
    lengths = [5, 0, 2, 1, 4, 3]
    mask = (np.arange(5)[None, :] < np.array(lengths)[:, None]).astype(np.int64)
    # Global counts worked out from `lengths`: 15 tokens, 6 rows, 5 non-empty, R = 5.
    stats = MiniBatchStats(num_tokens=15, num_seqs=6, num_nonempty_seqs=5, max_response_len=5)
    expected = _numpy_aggregate(values, mask, mode)

    values_t, mask_t = torch.tensor(values), torch.tensor(mask)
    whole = aggregate(values_t, mask_t, mode)
    assert math.isclose(whole.item(), expected, rel_tol=1e-9)
    pieces = [(0, 2), (2, 5), (5, 6)]
    total = sum(aggregate(values_t[a:b], mask_t[a:b], mode, stats) for a, b in pieces)
    assert math.isclose(total.item(), expected, rel_tol=1e-9)


def test_micro_batch_own_counts_differ_from_global():
    # Guard for the test above: normalising micro-batches by their own counts gives another value.
    values = torch.tensor([[1.0, 1.0, 1.0], [4.0, 0.0, 0.0]])
    mask = torch.tensor([[1, 1, 1], [1, 0, 0]])
    own = aggregate(values[:1], mask[:1], "token-mean") + aggregate(values[1:], mask[1:], "token-mean")
    assert own.item() == pytest.approx(1.0 + 4.0)
    assert aggregate(values, mask, "token-mean").item() == pytest.approx(7.0 / 4.0)


def test_masked_mean():
    assert masked_mean(VALUES, MASK).item() == pytest.approx(5.0)


@pytest.mark.parametrize("shift_mean", [True, False])
def test_masked_whiten_matches_numpy(shift_mean):
    rng = np.random.default_rng(1)
    values = rng.normal(loc=3.0, scale=2.0, size=(3, 4))
    mask = np.array([[1, 1, 1, 0], [0, 0, 0, 0], [1, 1, 1, 1]])
    selected = values[mask > 0]
    mean, var = selected.mean(), selected.var(ddof=1)
    expected = (values - mean) / np.sqrt(var + 1e-8)
    if not shift_mean:
        expected = expected + mean
    expected = np.where(mask > 0, expected, 0.0)
    result = masked_whiten(torch.tensor(values), torch.tensor(mask), shift_mean=shift_mean)
    np.testing.assert_allclose(result.numpy(), expected, rtol=1e-9, atol=1e-12)


def test_masked_whiten_needs_two_tokens():
    with pytest.raises(ValueError, match="at least 2 masked tokens"):
        masked_whiten(torch.ones(2, 2), torch.tensor([[1, 0], [0, 0]]))


# ------------------------------------------------------------------------------------ PPO clip
# One token per branch (ε_low = ε_high = 0.2, c = 3), worked by hand; the last column is
# dL/dlog π with c = 3: −Aρ where neither clip is active, else 0.
#  ρ     A    −Aρ   −A·clip(ρ)  L (no dual)  clipped  L (c=3)  dual   dL/dlogπ
#  1.1   1   −1.1   −1.1        −1.1         0        −1.1     0      −1.1
#  1.5   1   −1.5   −1.2        −1.2         1        −1.2     0       0
#  0.5  −1    0.5    0.8         0.8         1         0.8     0       0
#  5.0  −1    5.0    1.2         5.0         0         3.0     1       0   (without dual: 5.0)
#  0.5   1   −0.5   −0.8        −0.5         0        −0.5     0      −0.5
#  1.5  −1    1.5    1.2         1.5         0         1.5     0       1.5
#  (masked token with log-ratio 100, and padding)
LOG_RATIOS = [
    [math.log(1.1), math.log(1.5), math.log(0.5), math.log(5.0)],
    [math.log(0.5), math.log(1.5), 100.0, 0.0],
]
ADVANTAGES = torch.tensor([[1.0, 1.0, -1.0, -1.0], [1.0, -1.0, -1.0, 0.0]], dtype=torch.float64)
CLIP_MASK = torch.tensor([[1, 1, 1, 1], [1, 1, 0, 0]])


def _clip_inputs():
    old = torch.tensor([[-1.0, -2.0, -0.5, -3.0], [-1.5, -0.7, -2.0, 0.0]], dtype=torch.float64)
    new = old + torch.tensor(LOG_RATIOS, dtype=torch.float64)
    return new.requires_grad_(True), old


def test_ppo_clip_branches_without_dual_clip():
    new, old = _clip_inputs()
    terms = ppo_clip_loss(new, old, ADVANTAGES, CLIP_MASK)
    expected = [[-1.1, -1.2, 0.8, 5.0], [-0.5, 1.5, 0.0, 0.0]]
    np.testing.assert_allclose(terms.loss.detach().numpy(), expected, rtol=1e-12)
    np.testing.assert_array_equal(terms.clipped.numpy(), [[0, 1, 1, 0], [0, 0, 0, 0]])
    np.testing.assert_array_equal(terms.dual_clipped.numpy(), np.zeros((2, 4)))


def test_ppo_clip_branches_with_dual_clip_and_gradient():
    new, old = _clip_inputs()
    terms = ppo_clip_loss(new, old, ADVANTAGES, CLIP_MASK, clip_ratio_c=3.0)
    expected = [[-1.1, -1.2, 0.8, 3.0], [-0.5, 1.5, 0.0, 0.0]]
    np.testing.assert_allclose(terms.loss.detach().numpy(), expected, rtol=1e-12)
    np.testing.assert_array_equal(terms.clipped.numpy(), [[0, 1, 1, 0], [0, 0, 0, 0]])
    np.testing.assert_array_equal(terms.dual_clipped.numpy(), [[0, 0, 0, 1], [0, 0, 0, 0]])
    # pg_clipfrac = 2/6, pg_clipfrac_lower = 1/6 over the 6 real tokens.
    assert masked_mean(terms.clipped, CLIP_MASK).item() == pytest.approx(2 / 6)
    assert masked_mean(terms.dual_clipped, CLIP_MASK).item() == pytest.approx(1 / 6)
    # ppo_kl per token = log π_old − log π = −log ρ.
    expected_kl = -np.array(LOG_RATIOS) * CLIP_MASK.numpy()
    np.testing.assert_allclose(terms.ppo_kl.detach().numpy(), expected_kl, rtol=1e-12)
    terms.loss.sum().backward()
    np.testing.assert_allclose(new.grad.numpy(), [[-1.1, 0, 0, 0], [-0.5, 1.5, 0, 0]], rtol=1e-12, atol=1e-15)


def test_ppo_clip_higher_is_asymmetric():
    # ρ = 1.25 with A = 1: clipped at 1.2 when ε_high = 0.2, not clipped when ε_high = 0.28 (DAPO).
    new = torch.tensor([[math.log(1.25)]], dtype=torch.float64)
    old, adv = torch.zeros(1, 1, dtype=torch.float64), torch.ones(1, 1, dtype=torch.float64)
    mask = torch.ones(1, 1)
    assert ppo_clip_loss(new, old, adv, mask, 0.2, 0.2).loss.item() == pytest.approx(-1.2)
    assert ppo_clip_loss(new, old, adv, mask, 0.2, 0.28).loss.item() == pytest.approx(-1.25)


def test_ppo_clip_log_ratio_is_clamped():
    new = torch.tensor([[100.0]], dtype=torch.float64)
    old, mask = torch.zeros(1, 1, dtype=torch.float64), torch.ones(1, 1)
    loss = ppo_clip_loss(new, old, -torch.ones(1, 1, dtype=torch.float64), mask).loss
    assert loss.item() == pytest.approx(math.exp(20.0))


@pytest.mark.parametrize("c", [1.0, 0.5])
def test_ppo_clip_rejects_dual_clip_not_above_one(c):
    x = torch.zeros(1, 2)
    with pytest.raises(ValueError, match="clip_ratio_c"):
        ppo_clip_loss(x, x, x, x, clip_ratio_c=c)


# ------------------------------------------------------------------------------------ KL
D = np.array([-30.0, -3.0, -2.0, -0.5, 0.0, 0.3, 1.0, 4.0, 30.0])


@pytest.mark.parametrize(
    "names, formula",
    [
        (("k1", "kl"), lambda d: d),
        (("abs",), np.abs),
        (("k2", "mse"), lambda d: 0.5 * d**2),
        (("k3", "low_var_kl"), lambda d: np.clip(np.exp(-d) + d - 1.0, -10.0, 10.0)),
    ],
)
def test_kl_estimators_match_numpy(names, formula):
    ref = np.linspace(-2.0, -0.1, D.size)
    log_probs = torch.tensor(ref + D, requires_grad=True)
    for name in names:
        result = kl_estimate(log_probs, torch.tensor(ref), name)
        np.testing.assert_allclose(result.detach().numpy(), formula(D), rtol=1e-9, atol=1e-12)
        result.sum().backward()
        assert torch.isfinite(log_probs.grad).all()
        log_probs.grad = None


def test_k3_values_by_hand():
    # d = −2: e² − 3 = 4.389056; d = −3: e³ − 4 = 16.09 → clamped to 10; d = 30: 29 + e^−30 → 10.
    d = torch.tensor([-2.0, -3.0, 30.0], dtype=torch.float64)
    result = kl_estimate(d, torch.zeros(3, dtype=torch.float64), "k3")
    np.testing.assert_allclose(result.numpy(), [4.389056099, 10.0, 10.0])


def test_kl_unknown_estimator_lists_choices():
    with pytest.raises(ValueError, match="low_var_kl"):
        kl_estimate(torch.zeros(2), torch.zeros(2), "k4")
