"""rlloom.threads: each process's torch thread count from its placement."""

from __future__ import annotations

import pytest
import torch

from rlloom.controller.local import LocalLauncher, LocalLauncherConfig
from rlloom.threads import available_cores, threads_for


@pytest.fixture
def restore_threads():
    threads = torch.get_num_threads()
    yield
    torch.set_num_threads(threads)


def test_threads_follow_request_then_environment_then_placement(monkeypatch):
    monkeypatch.delenv("OMP_NUM_THREADS", raising=False)
    assert threads_for(3, 8) == 3  # an explicit count wins
    assert threads_for(0, 2.5) == 2  # whole reserved CPUs
    assert threads_for(0, 0.5) == 1  # at least one
    monkeypatch.setenv("OMP_NUM_THREADS", "5")
    assert threads_for(0, 2) == 5
    assert threads_for(4, 2) == 4
    monkeypatch.setenv("OMP_NUM_THREADS", "lots")  # not a count: ignored
    assert threads_for(0, 2) == 2


def test_local_launcher_sizes_the_pool_to_the_cores_or_the_request(monkeypatch, restore_threads):
    monkeypatch.delenv("OMP_NUM_THREADS", raising=False)
    torch.set_num_threads(1)
    LocalLauncher(LocalLauncherConfig(num_threads=0))
    assert torch.get_num_threads() == available_cores()
    LocalLauncher(LocalLauncherConfig(num_threads=1))
    assert torch.get_num_threads() == 1
