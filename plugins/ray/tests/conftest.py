"""Fixtures shared by the rlloom-ray tests: a local Ray cluster and a model cache per test module."""

from __future__ import annotations

import os

import pytest
import torch

os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")


@pytest.fixture(scope="module")
def cluster():
    """A local Ray cluster of 4 logical CPUs for the module (enough for 2 actor ranks, a rollout
    process and one more pool, 1 CPU each); this process computes on one thread."""
    ray = pytest.importorskip("ray")
    torch.set_num_threads(1)
    ray.init(num_cpus=4, include_dashboard=False)
    yield
    ray.shutdown()


@pytest.fixture(scope="module")
def cache(tmp_path_factory):
    """Where the module's tiny model is built (once per module)."""
    return str(tmp_path_factory.mktemp("ray-cache"))
