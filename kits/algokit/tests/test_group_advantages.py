"""Group-relative advantages (`rlloom_algokit.advantages.group_relative_advantages`, the estimator
``grpo``) against per-group numpy statistics."""

import numpy as np
import pytest
import torch
from rlloom_algokit.advantages import group_relative_advantages

EPS = 1e-6


def numpy_advantages(scores, groups, mask, norm_by_std=True, eps=EPS):
    """Per group: (r − mean) / (std_ddof1 + eps), or r − mean; a size-1 group uses mean 0 and std 1
    (verl's compute_grpo_outcome_advantage); × mask."""
    scores = np.asarray(scores, dtype=np.float64)
    out = np.zeros_like(scores)
    for group in set(groups):
        rows = [i for i, g in enumerate(groups) if g == group]
        values = scores[rows]
        if len(rows) == 1:
            out[rows] = values / (1 + eps) if norm_by_std else values
            continue
        centered = values - values.mean()
        out[rows] = centered / (values.std(ddof=1) + eps) if norm_by_std else centered
    return out[:, None] * np.asarray(mask)


def ragged_mask(lengths, width):
    return (np.arange(width)[None, :] < np.array(lengths)[:, None]).astype(np.int64)


def test_hand_worked_group():
    # Scores [1, 0, 0, 1]: mean 0.5, unbiased std sqrt(4·0.25/3) = 0.5773503, A = ±0.5/0.5773503 = ±0.8660254.
    mask = torch.tensor([[1, 1, 0], [1, 0, 0], [1, 1, 1], [0, 0, 0]])
    adv = group_relative_advantages(torch.tensor([1.0, 0.0, 0.0, 1.0]), ["p"] * 4, mask)
    a = 0.8660254
    expected = [[a, a, 0], [-a, 0, 0], [-a, -a, -a], [0, 0, 0]]
    np.testing.assert_allclose(adv.numpy(), expected, rtol=1e-5)
    assert adv.dtype == torch.float32


@pytest.mark.parametrize("norm_by_std", [True, False])
def test_matches_numpy_with_ragged_masks(norm_by_std):
    rng = np.random.default_rng(0)
    groups = [g for g in range(5) for _ in range(4)]  # 5 prompts × n = 4, contiguous
    scores = rng.normal(size=20)
    mask = ragged_mask(rng.integers(0, 7, size=20), 6)
    adv = group_relative_advantages(torch.tensor(scores, dtype=torch.float32), groups, torch.tensor(mask),
                                    norm_by_std=norm_by_std)
    expected = numpy_advantages(np.float32(scores), groups, mask, norm_by_std)
    np.testing.assert_allclose(adv.numpy(), expected, rtol=1e-5, atol=1e-6)


def test_dr_grpo_hand_values():
    # Group a: [3, 1] → mean 2 → [1, −1]; group b: [0.5, 0.5, 2] → mean 1 → [−0.5, −0.5, 1].
    adv = group_relative_advantages(torch.tensor([3.0, 0.5, 1.0, 0.5, 2.0]), ["a", "b", "a", "b", "b"],
                                    torch.ones(5, 1, dtype=torch.int64), norm_by_std=False)
    np.testing.assert_allclose(adv[:, 0].numpy(), [1.0, -0.5, -1.0, -0.5, 1.0], rtol=1e-6)


@pytest.mark.parametrize("norm_by_std", [True, False])
def test_singleton_groups_keep_their_raw_reward_as_verl(norm_by_std):
    mask = torch.ones(4, 2, dtype=torch.int64)
    adv = group_relative_advantages(torch.tensor([5.0, 1.0, 2.0, -3.0]), ["x", "y", "y", "z"], mask,
                                    norm_by_std=norm_by_std, eps=1e-6)
    # x and z are alone: verl uses mean 0 and std 1 → r / (1 + eps) (GRPO) or r (Dr.GRPO).
    # y: [1, 2] → mean 1.5; GRPO divides by std sqrt(0.5): ∓0.5 / 0.7071068 = ∓0.7071068.
    alone = 1 / (1 + 1e-6) if norm_by_std else 1.0
    pair = 0.5 / (np.sqrt(0.5) + 1e-6) if norm_by_std else 0.5
    np.testing.assert_allclose(adv[:, 0].numpy(), [5.0 * alone, -pair, pair, -3.0 * alone], rtol=1e-6)
    np.testing.assert_allclose(adv[:, 1].numpy(), adv[:, 0].numpy())


def test_n_equal_to_one_trains_on_the_raw_reward():
    # n = 1: every group is a singleton; before, every advantage was 0 and nothing was learned.
    adv = group_relative_advantages(torch.tensor([1.0, 0.0, 1.0]), [0, 1, 2], torch.ones(3, 1, dtype=torch.int64),
                                    norm_by_std=False)
    assert adv[:, 0].tolist() == [1.0, 0.0, 1.0]


@pytest.mark.parametrize("value", [0.0, 1.0, 0.1, -7.3])
@pytest.mark.parametrize("norm_by_std", [True, False])
def test_all_equal_rewards_give_exactly_zero(value, norm_by_std):
    scores = torch.full((6,), value)
    adv = group_relative_advantages(scores, [0, 0, 0, 1, 1, 1], torch.ones(6, 3, dtype=torch.int64),
                                    norm_by_std=norm_by_std)
    assert torch.equal(adv, torch.zeros(6, 3))


def test_interleaved_and_shuffled_orders_match_contiguous():
    rng = np.random.default_rng(1)
    groups = [f"uid-{g}" for g in range(4) for _ in range(3)]
    scores = torch.tensor(rng.integers(0, 3, size=12), dtype=torch.float32)
    mask = torch.tensor(ragged_mask(rng.integers(1, 5, size=12), 4))
    contiguous = group_relative_advantages(scores, groups, mask)
    expected = numpy_advantages(scores.numpy(), groups, mask.numpy())
    np.testing.assert_allclose(contiguous.numpy(), expected, rtol=1e-5, atol=1e-6)
    interleaved = [g * 3 + k for k in range(3) for g in range(4)]  # [a, b, c, d, a, b, c, d, …]
    shuffled = rng.permutation(12).tolist()
    for order in (interleaved, shuffled):
        adv = group_relative_advantages(scores[order], [groups[i] for i in order], mask[order])
        np.testing.assert_allclose(adv.numpy(), contiguous[order].numpy(), rtol=1e-6, atol=1e-7)


def test_mixed_hashable_group_ids():
    groups = [("p", 1), 7, ("p", 1), 7]
    adv = group_relative_advantages(torch.tensor([1.0, 4.0, 3.0, 2.0]), groups, torch.ones(4, 1, dtype=torch.int64),
                                    norm_by_std=False)
    np.testing.assert_allclose(adv[:, 0].numpy(), [-1.0, 1.0, 1.0, -1.0])


def test_input_validation():
    mask = torch.ones(3, 2)
    with pytest.raises(ValueError, match="group_ids has 2 entries"):
        group_relative_advantages(torch.zeros(3), [0, 1], mask)
    with pytest.raises(ValueError, match="scores must be 1-D"):
        group_relative_advantages(torch.zeros(3, 1), [0, 1, 2], mask)
    with pytest.raises(ValueError, match="response_mask must be"):
        group_relative_advantages(torch.zeros(3), [0, 1, 2], torch.ones(2, 2))
    with pytest.raises(ValueError, match="eps must be > 0"):
        group_relative_advantages(torch.zeros(3), [0, 1, 2], mask, eps=0.0)
