"""rlloom_enginekit.threads: each process's torch thread count from its placement."""

from __future__ import annotations

from rlloom_enginekit.threads import threads_for


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
