"""ReMax advantages by hand, registration, and a tiny end-to-end run with its greedy baseline."""

import importlib.metadata
import json

import pytest
import torch

import rlloom
from rlloom.plugins.registry import Registry
from rlloom_remax import ReMax, ReMaxConfig, remax_advantages


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
    entry_points = [ep for ep in importlib.metadata.entry_points(group="rlloom") if ep.name == "remax"]
    registry = Registry(entry_points[:1])
    assert [s.status for s in registry.statuses] == ["loaded"], registry.statuses[0].traceback
    assert registry.get("algorithm", "remax").config is ReMaxConfig
    assert isinstance(registry.build("algorithm", "remax", ReMaxConfig()), ReMax)


@pytest.fixture(scope="module")
def rows(tmp_path_factory):
    run_dir = tmp_path_factory.mktemp("remax-run")
    rlloom.train(["preset=tiny", "algorithm=remax", f"trainer.run_dir={run_dir}",
                  f"model.cache_dir={tmp_path_factory.mktemp('cache')}"])
    rows = map(json.loads, (run_dir / "metrics.jsonl").read_text().splitlines())
    return [row for row in rows if row["step"] > 0 and "critic/score/mean" in row]


@pytest.mark.slow
def test_remax_reward_rises(rows):
    scores = [row["critic/score/mean"] for row in rows]
    assert len(scores) == 20
    assert sum(scores[-3:]) / 3 > sum(scores[:3]) / 3 + 0.3, scores


@pytest.mark.slow
def test_every_step_runs_the_greedy_baseline(rows):
    for row in rows:
        assert row["timing_s/gen_baseline"] > 0
        assert 0.0 <= row["remax/baseline_score/mean"] <= 1.0
