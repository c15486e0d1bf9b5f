"""Smoke test of ``examples/gsm_symbolic/run.sh``: one GRPO step on SmolLM2 with reward=math."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from rlloom_trainer.testing import metric_rows

RUN_SH = Path(__file__).parents[1] / "examples" / "gsm_symbolic" / "run.sh"


@pytest.mark.slow
def test_the_example_command_runs_one_step(tmp_path):
    env = {**os.environ, "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}"}
    small = ["trainer.total_steps=1", "data.num_train=2", "data.num_val=1", "trainer.train_batch_size=1",
             "algorithm.n=2", "sampling.max_new_tokens=8", "trainer.val_before_train=false",
             "trainer.val_greedy=false", "trainer.save_final_model=false", f"trainer.run_dir={tmp_path}"]
    done = subprocess.run(["bash", str(RUN_SH), *small], env=env, capture_output=True, text=True, timeout=900,
                          check=False)
    assert done.returncode == 0, done.stderr[-3000:]
    rows = metric_rows(tmp_path)
    (step,) = [row for row in rows if row["step"] == 1]
    assert step["reward/errors"] == 0 and step["reward/timeouts"] == 0
    assert 0.0 <= step["reward/correct/mean"] <= step["reward/extracted/mean"] <= 1.0
    assert "val-core/reasoning_gym/gsm_symbolic/acc/mean@1" in step
