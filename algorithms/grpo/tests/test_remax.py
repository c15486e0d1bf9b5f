"""ReMax advantages by hand, registration, and a tiny end-to-end run with its greedy baseline."""

import pytest
import torch
from rlloom_grpo import ReMax, ReMaxConfig, remax_advantages
from rlloom_trainer.testing import train_tiny, training_rows

from family_checks import built_member


def test_reward_to_go_minus_greedy_score():
    rewards = torch.tensor([[0.0, 0.5, 1.0], [0.0, 0.0, 0.0], [0.3, 0.0, 0.0]])
    mask = torch.tensor([[1, 1, 1], [0, 0, 0], [1, 0, 0]])
    baselines = torch.tensor([0.5, 1.0, 0.3])
    # row 0: to-go (1.5, 1.5, 1.0) − 0.5; row 1 empty → 0; row 2: 0.3 − 0.3 = 0 (sample = greedy score)
    expected = torch.tensor([[1.0, 1.0, 0.5], [0.0, 0.0, 0.0], [0.0, 0.0, 0.0]])
    torch.testing.assert_close(remax_advantages(rewards, baselines, mask), expected)
    with pytest.raises(ValueError, match="baselines must be \\[N=3\\]"):
        remax_advantages(rewards, torch.zeros(2), mask)


def test_entry_point_registers_remax():
    algorithm, registry = built_member("remax", ReMaxConfig)
    assert isinstance(algorithm, ReMax) and algorithm.estimator is registry.get("advantage_estimator", "remax").factory


SEEDS = (0, 1, 2)


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    """Training rows of a tiny ReMax run per seed. On this task ReMax takes off at a seed-dependent
    step (measured: seeds 1 and 2 reach ~0.9 by step 20, seed 0 stays below 0.2), so learning is
    asserted over several seeds rather than on one lucky one."""
    cache = tmp_path_factory.mktemp("cache")
    runs = {}
    for seed in SEEDS:
        run_dir = tmp_path_factory.mktemp(f"remax-run-{seed}")
        runs[seed] = training_rows(train_tiny(run_dir, "algorithm=remax", f"trainer.seed={seed}", cache_dir=cache))
    return runs


@pytest.fixture(scope="module")
def rows(runs):
    return runs[SEEDS[0]]


@pytest.mark.slow
def test_remax_reward_rises_for_most_seeds(runs):
    risen = 0
    for rows in runs.values():
        scores = [row["critic/score/mean"] for row in rows]
        assert len(scores) == 20
        risen += sum(scores[-3:]) / 3 > sum(scores[:3]) / 3 + 0.3
    assert risen >= 2, {seed: [round(row["critic/score/mean"], 2) for row in rows] for seed, rows in runs.items()}


@pytest.mark.slow
def test_every_step_runs_the_greedy_baseline(rows):
    for row in rows:
        assert row["timing_s/gen_baseline"] > 0
        assert 0.0 <= row["remax/baseline_score/mean"] <= 1.0
