"""Every example's one command runs in its short mode (``examples/<name>/run.sh --short``: the same pipeline on
the tiny random model), from the repository root as its README types it, and trains."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from rlloom_trainer.testing import metric_rows, training_rows

REPO = Path(__file__).resolve().parents[1]
SHORT = ["quickstart", "own_task", "ppo_critic", "ray_split", "sft_then_grpo", "custom_estimator"]


def run_example(name: str, cache: str, *overrides: str, **env: str) -> subprocess.CompletedProcess:
    """``examples/<name>/run.sh --short *overrides`` with the tiny model built in (or read from) ``cache``."""
    path = f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}"
    environment = {**{k: v for k, v in os.environ.items() if k != "RLLOOM_PLUGINS"}, "PATH": path,
                   "RLLOOM_CACHE": cache, **env}
    done = subprocess.run(["bash", f"examples/{name}/run.sh", "--short", *overrides], cwd=REPO, env=environment,
                          capture_output=True, text=True, timeout=900)
    assert done.returncode == 0, done.stderr[-3000:]
    return done


def trained_steps(run_dir: Path, key: str = "critic/score/mean") -> list[int]:
    return [row["step"] for row in training_rows(metric_rows(run_dir), key)]


def test_every_example_with_a_command_has_a_short_mode_here():
    with_command = sorted(p.parent.name for p in (REPO / "examples").glob("*/run.sh"))
    assert sorted(SHORT + ["gsm_symbolic"]) == with_command  # gsm_symbolic: SmolLM2 only, its own test


@pytest.mark.slow
@pytest.mark.parametrize("name", ["quickstart", "own_task", "ppo_critic", "ray_split"])
def test_the_short_mode_trains(name, tmp_path, rlloom_tiny_model_cache):
    run_example(name, rlloom_tiny_model_cache, f"trainer.run_dir={tmp_path}")
    assert trained_steps(tmp_path) == [1, 2]
    rows = metric_rows(tmp_path)
    if name == "own_task":
        assert all(row["reward/errors"] == 0 for row in training_rows(rows))
        assert any(key.startswith("val-core/files/") for row in rows for key in row)
    if name == "ppo_critic":
        assert all("critic/vf_loss" in row for row in training_rows(rows)[1:])  # after one warm-up step


@pytest.mark.slow
def test_sft_then_grpo_starts_grpo_from_the_sft_model(tmp_path, rlloom_tiny_model_cache):
    run_example("sft_then_grpo", rlloom_tiny_model_cache, RUNS=str(tmp_path))
    assert trained_steps(tmp_path / "sft", "actor/sft_loss") == [1, 2, 3, 4, 5]
    assert trained_steps(tmp_path / "grpo") == [1, 2]
    config = (tmp_path / "grpo" / "config.yaml").read_text()
    assert f"path: {tmp_path}/sft/final_model" in config


@pytest.mark.slow
def test_the_custom_estimator_installs_apart_and_trains_with_the_median_baseline(tmp_path, rlloom_tiny_model_cache):
    site = tmp_path / "site"
    run_example("custom_estimator", rlloom_tiny_model_cache, f"trainer.run_dir={tmp_path / 'run'}", SITE=str(site))
    assert trained_steps(tmp_path / "run") == [1, 2]
    assert "median_baseline" in (tmp_path / "run" / "config.yaml").read_text()
    check = ("import torch, median_baseline as m\n"
             "a = m.median_baseline(scores=torch.tensor([1., 0., 0., 5., 2., 3.]), group_ids=[0, 0, 0, 1, 1, 1],"
             " response_mask=torch.tensor([[1, 1]] * 5 + [[1, 0]]))\n"
             "print(a.tolist())")
    done = subprocess.run([sys.executable, "-c", check], env={**os.environ, "PYTHONPATH": str(site)},
                          capture_output=True, text=True, timeout=120)
    # group 0: median 0 -> 1, 0, 0; group 1: median 3 -> 2, -1, 0 (the last row's padding 0)
    assert done.stdout.strip() == str([[1.0, 1.0], [0.0, 0.0], [0.0, 0.0], [2.0, 2.0], [-1.0, -1.0], [0.0, 0.0]])
