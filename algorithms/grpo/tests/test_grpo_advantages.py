"""GRPO's advantages: the estimator chosen by ``adv_estimator`` over the batch's fields."""

import numpy as np
import pytest
import torch

from rlloom.batch import Batch
from rlloom_algokit import GRPO, GRPOConfig


def test_passk_needs_two_samples_per_group():
    with pytest.raises(ValueError, match="^algorithm.n=1: adv_estimator=grpo_passk .* needs n >= 2$"):
        GRPOConfig(adv_estimator="grpo_passk", n=1)


def test_grpo_compute_advantages_reads_batch_fields():
    rng = np.random.default_rng(2)
    uids = np.array(["q0", "q1"] * 4, dtype=object)
    scores = rng.normal(size=8).astype(np.float32)
    lengths = np.array([3, 0, 2, 4, 1, 4, 2, 3])
    mask = (np.arange(4)[None, :] < lengths[:, None]).astype(np.int64)
    # the empty response (row 1) keeps its score in its group's statistics: scores, not token rewards
    batch = Batch({"scores": torch.tensor(scores), "response_mask": torch.tensor(mask),
                   "token_level_scores": torch.zeros(8, 4)}, {"uid": uids})
    groups = {uid: scores[uids == uid].astype(np.float64) for uid in ("q0", "q1")}
    for norm in (True, False):
        expected = np.array([
            (s - groups[u].mean()) / ((groups[u].std(ddof=1) + 1e-6) if norm else 1.0) for s, u in zip(scores, uids)
        ])[:, None] * mask
        algorithm = GRPO(GRPOConfig(n=4, norm_adv_by_std=norm))
        np.testing.assert_allclose(algorithm.compute_advantages(batch).numpy(), expected, rtol=1e-5, atol=1e-6)
    with pytest.raises(ValueError, match="uid"):
        GRPO(GRPOConfig()).compute_advantages(batch.exclude("uid"))
    with pytest.raises(ValueError, match="advantage estimator 'grpo' needs scores"):
        GRPO(GRPOConfig()).compute_advantages(batch.exclude("scores"))

