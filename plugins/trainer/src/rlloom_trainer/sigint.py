"""Whether Ctrl-C (SIGINT) arrived during a run, even when a library caught the ``KeyboardInterrupt``
it raised and reported an error of its own: DCP wraps it in its ``CheckpointException``, and torch's
zip writer, interrupted in the middle of a write, fails the next one with "unexpected pos". The
checkpoint manager asks :func:`received` before calling a failed save a failure
(:meth:`rlloom_trainer.checkpoint.CheckpointManager.save`)."""

from __future__ import annotations

import contextlib
import signal
import threading
from collections.abc import Iterator

_received = threading.Event()


def _remember_and_interrupt(signum, frame) -> None:
    _received.set()
    raise KeyboardInterrupt


@contextlib.contextmanager
def recording_interrupts() -> Iterator[None]:
    """Inside the block SIGINT raises ``KeyboardInterrupt`` as Python's own handler does, and is
    remembered for :func:`received` until the block ends. It changes nothing where
    Python's handler is not the one installed (SIGINT ignored, a handler of the caller's) or off the
    main thread, where no handler can be set."""
    _received.clear()
    main = threading.current_thread() is threading.main_thread()
    if not main or signal.getsignal(signal.SIGINT) is not signal.default_int_handler:
        yield
        return
    signal.signal(signal.SIGINT, _remember_and_interrupt)
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, signal.default_int_handler)
        _received.clear()


def received() -> bool:
    """Whether SIGINT arrived inside the current :func:`recording_interrupts` block (False outside one)."""
    return _received.is_set()
