"""``train_engine.sequence_parallel_size=2`` end to end: the tiny GRPO run over Ray on a pool of two
workers (actor, reference and rollout colocated) starts at SP = 1 (two data-parallel ranks), stops
at a checkpoint, and resumes it at SP = 2 (one sequence-parallel group): it goes on learning and its
rollout engine samples with the weights the SP = 2 trainer synced; a size that does not divide the
pool stops the run, the key named."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest
from omegaconf import OmegaConf
from rlloom_trainer.testing import train_tiny, training_rows

ON_RAY = ["launcher=ray", "+launcher.resource_pools.global=2", "trainer.trackers=[jsonl]"]
SWITCH_AT = 8  # the SP = 1 run's last step and checkpoint


@pytest.mark.slow
def test_tiny_grpo_resumes_an_sp1_checkpoint_at_sp2_and_learns(ray_cluster, tmp_path):
    run_dir, cache = tmp_path / "run", tmp_path / "cache"
    train_tiny(run_dir, *ON_RAY, f"trainer.total_steps={SWITCH_AT}", f"trainer.save_freq={SWITCH_AT}", cache_dir=cache)
    rows = training_rows(train_tiny(run_dir, *ON_RAY, "train_engine.sequence_parallel_size=2", cache_dir=cache))
    assert [row["step"] for row in rows] == list(range(1, 21))  # steps 9-20 appended to the SP = 1 run's
    sizes = [OmegaConf.load(folder / "config.yaml").train_engine.sequence_parallel_size
             for folder in (run_dir / "checkpoints" / f"global_step_{SWITCH_AT}", run_dir)]
    assert sizes == [1, 2]
    first = sum(row["critic/score/mean"] for row in rows[:3]) / 3
    last = sum(row["critic/score/mean"] for row in rows[-3:]) / 3
    assert last > first + 0.5, (first, last)
    for row in rows[SWITCH_AT:]:
        # the rollout engine scores its samples with the weights the SP = 2 trainer just synced
        assert row["training/rollout_probs_diff_mean"] < 1e-4, row


@pytest.mark.slow
def test_a_size_that_does_not_divide_the_pool_stops_the_run_naming_the_key(tmp_path):
    """Under ``launcher=ray`` the engines check in their workers: exit status 2, one paragraph."""
    command = [sys.executable, "-m", "rlloom.cli", "train", "preset=tiny", "train_engine.sequence_parallel_size=2",
               "launcher=ray", "+launcher.resource_pools.global=3", "launcher.num_cpus=3",
               f"trainer.run_dir={tmp_path / 'run'}", f"model.cache_dir={tmp_path / 'cache'}"]
    result = subprocess.run(command, capture_output=True, text=True, timeout=300, env=os.environ | {"OMP_NUM_THREADS": "1"})
    assert result.returncode == 2, result.stderr[-3000:]
    last = result.stderr.strip().splitlines()[-1]
    assert last.startswith("rlloom: error: the ") and " role (train_engine=fsdp) could not start: " in last, last
    assert "ValueError: train_engine.sequence_parallel_size=2 must divide the train engine's world size (3;" in last
    assert "Traceback" not in result.stderr
