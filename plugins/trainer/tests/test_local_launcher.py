"""launcher=local: every role in this process, its torch thread pool sized from the cores or the request."""

from __future__ import annotations

import pytest
import torch
from rlloom_enginekit.threads import available_cores
from rlloom_trainer.local import LocalLauncher, LocalLauncherConfig


@pytest.fixture
def restore_threads():
    threads = torch.get_num_threads()
    yield
    torch.set_num_threads(threads)


def test_local_launcher_sizes_the_pool_to_the_cores_or_the_request(monkeypatch, restore_threads):
    monkeypatch.delenv("OMP_NUM_THREADS", raising=False)
    torch.set_num_threads(1)
    LocalLauncher(LocalLauncherConfig(num_threads=0))
    assert torch.get_num_threads() == available_cores()
    LocalLauncher(LocalLauncherConfig(num_threads=1))
    assert torch.get_num_threads() == 1


def test_a_negative_thread_count_is_refused_naming_the_key():
    with pytest.raises(ValueError, match=r"^launcher\.num_threads=-1: must be >= 0$"):
        LocalLauncherConfig(num_threads=-1)
