"""GRPO pass@k advantages (adv_estimator=grpo_passk) against hand-computed values."""

import pytest
import torch

from rlloom.batch import Batch
from rlloom.plugins.registry import UnknownPluginError
from rlloom_algokit import GRPO, GRPOConfig
from rlloom_grpo import passk_advantages


def test_only_the_best_sample_of_each_group_learns():
    scores = torch.tensor([0.2, 0.9, 0.5, 1.0, 1.0, 0.0, 0.3, 0.7])
    uids = ["a", "a", "a", "b", "b", "b", "c", "d"]
    mask = torch.tensor([[1, 1]] * 7 + [[1, 0]])
    out = passk_advantages(scores, uids, mask, norm_by_std=False)
    # a: best 0.9, second 0.5 → 0.4 on row 1; b: best tied (1.0, 1.0) → 0; c, d: groups of one → 0.
    expected = torch.tensor([0.0, 0.4, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0])[:, None] * mask
    torch.testing.assert_close(out, expected)


def test_norm_by_std_divides_by_the_unbiased_group_std():
    scores = torch.tensor([1.0, 0.0, 4.0, 0.0, 2.0])
    uids = [0, 1, 0, 1, 0]  # groups need not be contiguous: {1, 4, 2} and {0, 0}
    mask = torch.tensor([[1, 1, 0]] * 4 + [[0, 0, 0]])
    out = passk_advantages(scores, uids, mask, norm_by_std=True, eps=1e-6)
    std = 1.5275252316519468  # unbiased std of (1, 4, 2) = sqrt(((−4/3)² + (5/3)² + (−1/3)²) / 2)
    expected = torch.zeros(5, 3)
    expected[2, :2] = (4.0 - 2.0) / (std + 1e-6)
    torch.testing.assert_close(out, expected)


def test_config_selects_the_estimator_and_validates_it():
    batch = Batch(
        {"scores": torch.tensor([0.0, 1.0, 3.0]), "response_mask": torch.ones(3, 2, dtype=torch.long)},
        {"uid": ["u", "u", "u"]},
    )
    passk = GRPO(GRPOConfig(adv_estimator="grpo_passk", norm_adv_by_std=False)).compute_advantages(batch)
    torch.testing.assert_close(passk, torch.tensor([[0.0, 0.0], [0.0, 0.0], [2.0, 2.0]]))
    grpo = GRPO(GRPOConfig(norm_adv_by_std=False)).compute_advantages(batch)
    torch.testing.assert_close(grpo[:, 0], torch.tensor([-4 / 3, -1 / 3, 5 / 3]))
    # an unknown name is refused naming the installed estimators (and at config time: core/tests/test_config.py)
    with pytest.raises(UnknownPluginError, match="provides advantage_estimator 'passk'. Installed choices: grpo, "):
        GRPO(GRPOConfig(adv_estimator="passk"))
