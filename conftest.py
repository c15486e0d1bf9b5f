"""Fixtures shared by every test folder: one local Ray cluster for the whole session.

Starting and stopping a local Ray cluster takes seconds; the modules that need one in this process
(``plugins/ray/tests``, the Ray runs of ``tests/``) share it instead of each starting their own. A run
with ``launcher=ray`` in this process attaches to it (the launcher starts a cluster only when none is
up) and leaves it running; a test about the launcher's own cluster asks for ``without_ray_cluster``.
"""

from __future__ import annotations

import os
import sys

import pytest

RAY_CPUS = 4  # 2 actor ranks, a rollout process and one more pool, 1 CPU each


def stop_ray() -> None:
    ray = sys.modules.get("ray")
    if ray is not None and ray.is_initialized():
        ray.shutdown()


@pytest.fixture(scope="session")
def _ray_session():
    """Stops the shared cluster when the session ends."""
    yield
    stop_ray()


@pytest.fixture(scope="module")
def ray_cluster(_ray_session):
    """This process attached to the session's local Ray cluster of :data:`RAY_CPUS` logical CPUs, started
    here if none is up. Worker output is not copied to this process's stdout: a line a worker printed
    late would otherwise land in whatever test runs next (the workers' logs stay in Ray's session folder).
    This process computes on one thread."""
    os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")
    ray = pytest.importorskip("ray")
    import torch

    torch.set_num_threads(1)
    if not ray.is_initialized():
        ray.init(num_cpus=RAY_CPUS, include_dashboard=False, log_to_driver=False)


@pytest.fixture
def without_ray_cluster():
    """No Ray cluster attached to this process (the shared one is stopped; the next ``ray_cluster`` starts it
    again)."""
    stop_ray()
