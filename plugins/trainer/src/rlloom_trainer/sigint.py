"""Ctrl-C (SIGINT) and SIGTERM (what schedulers, ``docker stop``, Kubernetes and Slurm send) during a run:
inside :func:`recording_interrupts` the first of them raises ``KeyboardInterrupt`` and is remembered, even
when a library caught the ``KeyboardInterrupt`` and reported an error of its own: DCP wraps it in its
``CheckpointException``, and torch's zip writer, interrupted in the middle of a write, fails the next one with
"unexpected pos". The checkpoint manager asks :func:`received` before calling a failed save a failure
(:meth:`rlloom_trainer.checkpoint.CheckpointManager.save`), the training loop before each step, and
:func:`rlloom_trainer.run.fit_run` asks :func:`received_signal` which signal stopped the run. A second
signal ends the process at once, with status 128 + its number, while the run is being closed. A library that
installs its own handler inside the block (``ray.init`` makes SIGTERM ``sys.exit`` the driver) is overruled by
:func:`retake_signals`, which :func:`rlloom_trainer.run.fit_run` calls once the run is built."""

from __future__ import annotations

import contextlib
import os
import signal
import threading
from collections.abc import Iterator

_received = threading.Event()
_signal: list[int] = []  # the number of the first signal received in the current block
_taken: list[int] = []  # the signals the current block handles
_DEFAULT = {signal.SIGINT: signal.default_int_handler, signal.SIGTERM: signal.SIG_DFL}


def _remember_and_interrupt(signum, frame) -> None:
    if _received.is_set():
        os.write(2, f"rlloom: {signal.Signals(signum).name} again: exiting now\n".encode())
        os._exit(128 + signum)
    _signal[:] = [signum]
    _received.set()
    raise KeyboardInterrupt


@contextlib.contextmanager
def recording_interrupts() -> Iterator[None]:
    """Inside the block SIGINT and SIGTERM raise ``KeyboardInterrupt`` as Python's own SIGINT handler does,
    and the first is remembered for :func:`received` and :func:`received_signal` until the block ends; a
    second one exits at once (module doc). A signal whose handler is not Python's default (ignored, a handler
    of the caller's) is left alone, and so is everything off the main thread, where no handler can be set."""
    _received.clear()
    _signal.clear()
    taken = [number for number, default in _DEFAULT.items() if signal.getsignal(number) is default]
    if threading.current_thread() is not threading.main_thread():
        taken = []
    _taken[:] = taken
    retake_signals()
    try:
        yield
    finally:
        for number in taken:
            signal.signal(number, _DEFAULT[number])
        _taken.clear()
        _received.clear()
        _signal.clear()


def retake_signals() -> None:
    """Handle again the signals the current :func:`recording_interrupts` block took, whatever handler a
    library installed for them since (nothing outside a block)."""
    for number in _taken:
        signal.signal(number, _remember_and_interrupt)


def received() -> bool:
    """Whether SIGINT or SIGTERM arrived inside the current :func:`recording_interrupts` block (False outside
    one)."""
    return _received.is_set()


def received_signal() -> int | None:
    """The number of the first signal :func:`received`, or None."""
    return _signal[0] if _signal else None
