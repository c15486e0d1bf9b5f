"""Admission of ``/generate`` requests by a budget of tokens in flight (``--max-total-tokens``)."""

from __future__ import annotations

import asyncio
import contextlib
from collections import deque
from collections.abc import AsyncIterator


class TokenBudget:
    """At most ``capacity`` tokens reserved at once. :meth:`reserve` waits while the tokens are not
    free, in arrival order (a large request is not passed over by smaller ones behind it); a
    reservation withdrawn while waiting (its task cancelled) leaves the line. Belongs to one event
    loop."""

    def __init__(self, capacity: int) -> None:
        if capacity < 1:
            raise ValueError(f"the token budget must be >= 1, got {capacity}")
        self.capacity = capacity
        self.used = 0
        self._waiting: deque[tuple[int, asyncio.Future]] = deque()

    @contextlib.asynccontextmanager
    async def reserve(self, tokens: int) -> AsyncIterator[None]:
        """Hold ``tokens`` (1 <= tokens <= capacity, else ValueError) for the ``async with`` body."""
        if not 1 <= tokens <= self.capacity:
            raise ValueError(f"a reservation must be 1 to {self.capacity} tokens, got {tokens}")
        await self._acquire(tokens)
        try:
            yield
        finally:
            self._release(tokens)

    async def _acquire(self, tokens: int) -> None:
        if not self._waiting and self.used + tokens <= self.capacity:
            self.used += tokens
            return
        entry = (tokens, asyncio.get_running_loop().create_future())
        self._waiting.append(entry)
        try:
            await entry[1]
        except asyncio.CancelledError:
            if entry[1].done() and not entry[1].cancelled():  # granted, then cancelled: give it back
                self._release(tokens)
            elif entry in self._waiting:
                self._waiting.remove(entry)
                self._grant()
            raise

    def _release(self, tokens: int) -> None:
        self.used -= tokens
        self._grant()

    def _grant(self) -> None:
        while self._waiting and self.used + self._waiting[0][0] <= self.capacity:
            tokens, future = self._waiting.popleft()
            if not future.done():
                self.used += tokens
                future.set_result(None)
