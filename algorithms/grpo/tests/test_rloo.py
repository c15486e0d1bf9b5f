"""RLOO advantages vs a direct leave-one-out computation, registration, and a tiny end-to-end run."""

import numpy as np
import pytest
import torch
from rlloom_algokit import GRPO
from rlloom_grpo import RLOOConfig, rloo_advantages
from rlloom_trainer.testing import train_tiny, training_rows

from family_checks import assert_reward_rises, built_member


def test_leave_one_out_baseline():
    scores = np.array([1.0, 0.0, 0.5, 2.0, 3.0, 0.7, 0.4, 0.4])
    uids = ["a", "b", "a", "a", "b", "c", "d", "d"]
    mask = np.ones((8, 3))
    mask[1, 2:] = 0
    mask[3] = 0  # an empty response still has its score counted in the others' baselines
    expected = np.zeros(8)
    for i, uid in enumerate(uids):
        others = [scores[j] for j, u in enumerate(uids) if u == uid and j != i]
        expected[i] = scores[i] - np.mean(others) if others else scores[i]  # c: alone → its raw score (verl)
    out = rloo_advantages(torch.tensor(scores), uids, torch.tensor(mask))
    np.testing.assert_allclose(out.numpy(), expected[:, None] * mask, atol=1e-6)
    assert expected[0] == 1.0 - 1.25 and expected[6] == 0.0  # by hand: a = (1, 0.5, 2); d all equal
    assert out[5, 0] == pytest.approx(0.7)  # before, a group of one trained on 0


def test_entry_point_registers_rloo():
    algorithm, registry = built_member("rloo", RLOOConfig)
    assert type(algorithm) is GRPO and algorithm.estimator is registry.get("advantage_estimator", "rloo").factory


@pytest.fixture(scope="module")
def scores(tmp_path_factory):
    rows = train_tiny(tmp_path_factory.mktemp("rloo-run"), "algorithm=rloo", cache_dir=tmp_path_factory.mktemp("cache"))
    return [row["critic/score/mean"] for row in training_rows(rows)]


@pytest.mark.slow
def test_rloo_reward_rises(scores):
    assert_reward_rises(scores)
