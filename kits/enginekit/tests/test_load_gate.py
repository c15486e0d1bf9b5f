""":class:`rlloom_enginekit.partial.LoadGate`: a weight load handed over from another thread runs at once when no
generation is in flight, else flags the generation's call and waits for its swap (partial rollouts on Ray)."""

from __future__ import annotations

import threading

import pytest
import torch
from rlloom_enginekit.partial import LoadGate


def test_a_load_with_no_generation_in_flight_runs_at_once_and_labels_the_weights():
    gate, loaded = LoadGate(0), []
    assert gate.load(lambda: loaded.append("w1") or "stats", 3) == "stats"
    assert loaded == ["w1"] and gate.version == 3
    gate.load(lambda: loaded.append("w2"), None)
    assert loaded == ["w1", "w2"] and gate.version == 4


def wait_flagged(cancelled: torch.Tensor) -> None:
    """Until the loader's thread has handed its load over: the watched flags set."""
    while not bool(cancelled.all()):
        threading.Event().wait(0.01)


def test_a_load_during_a_generation_flags_its_call_and_runs_at_the_swap_in_the_generation_thread():
    gate, loaded, answers = LoadGate(0), [], []
    cancelled = torch.zeros(4, dtype=torch.bool)
    with gate.generating():
        gate.watch(cancelled)
        loader = threading.Thread(target=lambda: answers.append(
            gate.load(lambda: loaded.append(threading.current_thread().name) or "stats", 1)))
        loader.start()
        wait_flagged(cancelled)
        assert loaded == [] and answers == [] and gate.version == 0  # waits for the generation's swap
        gate.watch(None)
        gate.swap()
        assert loaded == [threading.current_thread().name] and gate.version == 1
        loader.join()
        assert answers == ["stats"]


def test_a_load_that_fails_in_the_generation_thread_raises_in_the_loaders():
    gate, errors = LoadGate(0), []

    def fail() -> None:
        raise RuntimeError("bad weights")

    def load() -> None:
        with pytest.raises(RuntimeError, match="bad weights"):
            gate.load(fail, 1)
        errors.append("raised")

    cancelled = torch.zeros(2, dtype=torch.bool)
    with gate.generating():
        gate.watch(cancelled)
        loader = threading.Thread(target=load)
        loader.start()
        wait_flagged(cancelled)
        gate.watch(None)
    loader.join()  # the generation's end ran it
    assert errors == ["raised"] and gate.version == 0


def test_a_submitted_load_is_not_waited_for_and_an_interrupt_flags_the_watched_call():
    """The rollout process's reader hands its loads over with ``submit`` and flags a streamed call for a job that
    waits to join it with ``interrupt``."""
    gate, loaded = LoadGate(0), []
    cancelled = torch.zeros(3, dtype=torch.bool)
    with gate.generating():
        gate.interrupt()  # no call watched: nothing to flag
        gate.watch(cancelled)
        pending = gate.submit(lambda: loaded.append("w"), None)  # returns at once, in this thread
        assert bool(cancelled.all()) and not pending.done.is_set() and loaded == []
        cancelled.zero_()
        gate.interrupt()
        assert bool(cancelled.all())
        gate.watch(None)
    assert pending.done.is_set() and loaded == ["w"] and gate.version == 1
