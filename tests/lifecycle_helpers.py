"""Helpers of the run-lifecycle tests: ``rlloom train preset=tiny`` as a real subprocess."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

from rlloom_trainer import testing
from rlloom_trainer.testing import default_sigint

RLLOOM = Path(sys.executable).parent / "rlloom"
# 6 steps, checkpoints after steps 2, 4 and 6, validation at steps 0, 3 and 6.
SCHEDULE = [
    "preset=tiny", "trainer.total_steps=6", "trainer.save_freq=2", "trainer.test_freq=3", "launcher.num_threads=1",
    "trainer.dump_rollouts=8",
]
def train_command(run_dir: str, cache_dir: str, *extra: str) -> list[str]:
    return [str(RLLOOM), "train", *SCHEDULE, f"trainer.run_dir={run_dir}", f"model.cache_dir={cache_dir}", *extra]


def run_env(**extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in ("RLLOOM_TEST_KILL_AT", "RLLOOM_PLUGINS")}
    env.update(OMP_NUM_THREADS="1", **extra)
    return env


def run(command: list[str], env: dict[str, str] | None = None) -> subprocess.CompletedProcess:
    return subprocess.run(command, env=env or run_env(), capture_output=True, text=True, timeout=300,
                          preexec_fn=default_sigint)


def metric_rows(run_dir: str) -> list[dict]:
    """metrics.jsonl without the values that measure time or memory (they differ between runs)."""
    return testing.comparable_rows(testing.metric_rows(run_dir))


def kill_when_logged(command: list[str], run_dir: str, step: int) -> int:
    """Start ``command``; SIGKILL it as soon as metrics.jsonl holds the training row of ``step``
    (the process is then inside step ``step + 1`` or its checkpoint). Returns the exit status."""
    process = subprocess.Popen(command, env=run_env(), stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    path = os.path.join(run_dir, "metrics.jsonl")
    deadline = time.monotonic() + 240
    try:
        while time.monotonic() < deadline and process.poll() is None:
            if os.path.isfile(path):
                with open(path, encoding="utf-8") as handle:
                    if any(f'"step": {step},' in line and "critic/score/mean" in line for line in handle):
                        process.send_signal(signal.SIGKILL)
                        break
            time.sleep(0.02)
    finally:
        returncode = process.wait(timeout=60)
    return returncode
