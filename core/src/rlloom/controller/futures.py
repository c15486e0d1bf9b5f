"""Futures (:class:`rlloom.protocols.Future`): :func:`submit` calls a role without waiting (a
:class:`RemoteHandle` returns a real future; an in-process call runs at once into a :class:`Completed`).
A future's span is the wall-clock interval in which the call ran (first rank's start to last rank's end);
:func:`overlap_s` measures how much the spans of calls on different worker groups overlapped."""

from __future__ import annotations

import time
from collections.abc import Sequence
from typing import Any

from rlloom.protocols import Future, RemoteHandle


class Completed:
    """The future of a call that already ran in this process."""

    def __init__(self, value: Any, start: float, end: float) -> None:
        self._value, self._span = value, (start, end)

    def result(self) -> Any:
        return self._value

    def span(self) -> tuple[float, float]:
        return self._span


def submit(handle: Any, method: str, *args: Any, **kwargs: Any) -> Future:
    """``handle.method(*args, **kwargs)`` as a :class:`Future` (``method="__call__"`` calls the handle); an
    in-process call's exception propagates from here, as from a direct call."""
    if isinstance(handle, RemoteHandle):
        return handle.submit_call(method, args, kwargs)
    start = time.time()
    value = handle(*args, **kwargs) if method == "__call__" else getattr(handle, method)(*args, **kwargs)
    return Completed(value, start, time.time())


def overlap_s(spans: Sequence[tuple[float, float]]) -> float:
    """How much of the spans' summed length ran at the same time as another span:
    ``sum(end - start) - length(union of the spans)`` (0 for calls that ran one after another)."""
    total = sum(end - start for start, end in spans)
    union, reach = 0.0, float("-inf")
    for start, end in sorted(spans):
        if end > reach:
            union += end - max(start, reach)
            reach = end
    return max(total - union, 0.0)
