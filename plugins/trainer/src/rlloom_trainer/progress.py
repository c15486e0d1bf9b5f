"""What the console shows while a long phase runs (model conversion, engine start, validation).

:func:`phase` names the phase on the console tracker's live bar while that bar is shown (the tracker
registers it with :func:`show_on_bar`); otherwise, when stderr is a terminal, it shows a spinner with the
phase's name; otherwise (logs, pipes, tests) nothing.
"""

from __future__ import annotations

import contextlib
import sys
from collections.abc import Iterator
from typing import Any

_bar: tuple[Any, Any] | None = None  # the console tracker's (rich Progress, task id) while it is live


def show_on_bar(progress: Any, task: Any) -> None:
    """Name phases on ``progress``'s task ``task`` from now on; ``show_on_bar(None, None)`` stops it."""
    global _bar
    _bar = (progress, task) if progress is not None else None


@contextlib.contextmanager
def phase(text: str) -> Iterator[None]:
    """Show ``text`` (e.g. ``"validating"``) on the console while the block runs, as the module says."""
    if _bar is not None:
        progress, task = _bar
        before = next(t.description for t in progress.tasks if t.id == task)
        progress.update(task, description=f"{text}…")
        try:
            yield
        finally:
            progress.update(task, description=before)
    elif sys.stderr.isatty():
        from rich.console import Console

        with Console(stderr=True).status(f"{text}…"):
            yield
    else:
        yield
