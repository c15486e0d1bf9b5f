"""Fixtures shared by the rlloom-ray tests: one model cache and one local reference run for the session (the
Ray cluster is the session's: ``ray_cluster`` in the repository's ``conftest.py``)."""

from __future__ import annotations

import os

import pytest
from ray_test_helpers import run_tiny

os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")


@pytest.fixture(scope="session")
def cache(tmp_path_factory):
    """Where the tiny model is built (once per session)."""
    return str(tmp_path_factory.mktemp("ray-cache"))


@pytest.fixture(scope="session")
def local_rows(tmp_path_factory, cache):
    """The metrics rows of ``preset=tiny`` for 2 steps under ``launcher=local`` on one thread: what the Ray
    runs of the same seed must reproduce."""
    return run_tiny(str(tmp_path_factory.mktemp("local")), cache, "launcher=local", "launcher.num_threads=1")
