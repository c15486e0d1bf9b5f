"""launcher=local: every role in this process, its torch thread pool sized from the cores or the request."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest
from rlloom_trainer.local import LocalLauncherConfig


SIZES = """
import torch
from rlloom_enginekit.threads import available_cores
from rlloom_trainer.local import LocalLauncher, LocalLauncherConfig

torch.set_num_threads(1)
LocalLauncher(LocalLauncherConfig(num_threads=0))
print(torch.get_num_threads(), available_cores())
LocalLauncher(LocalLauncherConfig(num_threads=1))
print(torch.get_num_threads())
"""


def test_local_launcher_sizes_the_pool_to_the_cores_or_the_request():
    """In a fresh process: another test's engine in this one (vLLM's CPU worker binds its OpenMP threads)
    may have fixed the pool."""
    env = {k: v for k, v in os.environ.items() if k != "OMP_NUM_THREADS"}
    result = subprocess.run([sys.executable, "-c", SIZES], capture_output=True, text=True, env=env, timeout=120)
    assert result.returncode == 0, result.stderr
    (threads, cores), (requested,) = (line.split() for line in result.stdout.splitlines())
    assert threads == cores and requested == "1"


def test_a_negative_thread_count_is_refused_naming_the_key():
    with pytest.raises(ValueError, match=r"^launcher\.num_threads=-1: must be >= 0$"):
        LocalLauncherConfig(num_threads=-1)


def test_a_train_engine_layout_of_several_processes_is_refused_before_the_run_folder(tmp_path):
    from rlloom.errors import ConfigError
    from rlloom_trainer import train

    run_dir = tmp_path / "run"
    with pytest.raises(ConfigError) as error:
        train(["preset=tiny", "train_engine.sequence_parallel_size=2", f"trainer.run_dir={run_dir}"])
    assert str(error.value) == ("train_engine.sequence_parallel_size=2 needs a train engine of 2 processes or a "
                                "multiple; launcher=local runs it in one: use launcher=ray "
                                "+launcher.resource_pools.global=2")
    assert not run_dir.exists()
