"""The generate work in flight by ``rid``, so that ``POST /abort_request`` can cancel it.

A request's work is one asyncio task (its prompts' ``generate_one`` calls); cancelling it cancels
their scheduler futures, which the batching scheduler flags to the engine
(:class:`rlloom.protocols.BatchesRequests`): an hf engine stops their rows within one decode step.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Iterator


class RunningRequests:
    """Tasks by rid (a request with several prompts may name one rid per prompt), and which of them
    an abort cancelled (:meth:`was_aborted`, read by the request's handler to answer it)."""

    def __init__(self) -> None:
        self._by_rid: dict[str, set[asyncio.Task]] = {}
        self._aborted: set[asyncio.Task] = set()

    @contextlib.contextmanager
    def track(self, rids: list[str] | None, task: asyncio.Task) -> Iterator[None]:
        """Keep ``task`` findable under each of ``rids`` while the block runs."""
        names = set(rids or ())
        for rid in names:
            self._by_rid.setdefault(rid, set()).add(task)
        try:
            yield
        finally:
            for rid in names:
                self._by_rid[rid].discard(task)
                if not self._by_rid[rid]:
                    del self._by_rid[rid]
            self._aborted.discard(task)

    def abort(self, rid: str | None, abort_all: bool = False) -> int:
        """Cancel the tasks running under ``rid`` (every tracked task with ``abort_all``); how many."""
        if abort_all:
            tasks = set().union(*self._by_rid.values())
        else:
            tasks = set(self._by_rid.get(rid, ()))
        for task in tasks:
            if not task.done():
                self._aborted.add(task)
                task.cancel()
        return len(tasks)

    def was_aborted(self, task: asyncio.Task) -> bool:
        return task in self._aborted
