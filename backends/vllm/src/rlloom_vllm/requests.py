"""Per-request generation on vLLM's own engine loop (continuous batching).

:class:`EngineLoop` feeds requests into vLLM's ``LLMEngine`` (``add_request``) as they arrive and
steps the engine while any is unfinished: each ``step()`` advances every running request by one
token, and a request added meanwhile joins the batch at the next step, so a short request never
waits for a long one to finish. The stepping runs as a task of the requests' event loop, on its
thread (vLLM's CPU build binds its OpenMP threads to the thread that built the engine and checks
them in its attention kernels, so the engine is not stepped from a thread of ours), and yields to
the loop between steps. A cancelled request is aborted in the engine at the next step.

The loop holds the engine lock for as long as it has requests in the engine, so the batch
``generate`` call (whose ``LLM.generate`` steps the same engine and would collect these requests'
outputs) and weight updates wait until it is idle.
"""

from __future__ import annotations

import asyncio
import itertools
import threading
from typing import Any


class EngineLoop:
    """``await submit(requests, params, adapter)`` -> the vLLM ``RequestOutput`` of each request, in order
    (``adapter``: the ``LoRARequest`` they generate with, or None)."""

    def __init__(self, llm_engine: Any, engine_lock: threading.Lock) -> None:
        self.engine = llm_engine
        self.lock = engine_lock
        self._ids = itertools.count()
        self._incoming: list[tuple[str, dict, Any, Any, asyncio.Future]] = []
        self._running: dict[str, asyncio.Future] = {}
        self._task: asyncio.Task | None = None

    async def submit(self, requests: list[dict], params: list, adapter: Any = None) -> list[Any]:
        from vllm.sampling_params import RequestOutputKind

        loop = asyncio.get_running_loop()
        futures = []
        for request, param in zip(requests, params):
            param.output_kind = RequestOutputKind.FINAL_ONLY  # one output, all n samples, when done (as LLM.generate)
            future = loop.create_future()
            self._incoming.append((f"rlloom-{next(self._ids)}", request, param, adapter, future))
            futures.append(future)
        if self._task is None or self._task.done():
            self._task = loop.create_task(self._run())
        return list(await asyncio.gather(*futures))

    def _admit(self) -> None:
        """Add the requests that arrived (unless cancelled); abort the running ones that were cancelled."""
        incoming, self._incoming = self._incoming, []
        for request_id, request, param, adapter, future in incoming:
            if future.cancelled():
                continue
            try:
                self.engine.add_request(request_id, request, param, lora_request=adapter)
            except Exception as error:  # noqa: BLE001 - goes to the request's caller
                future.set_exception(error)
                continue
            self._running[request_id] = future
        cancelled = [request_id for request_id, future in self._running.items() if future.cancelled()]
        if cancelled:
            self.engine.abort_request(cancelled)
            for request_id in cancelled:
                del self._running[request_id]

    async def _run(self) -> None:
        self.lock.acquire()
        try:
            while True:
                self._admit()
                if not self._running:
                    return
                try:
                    outputs = self.engine.step()
                except Exception as error:  # noqa: BLE001 - every running request learns why
                    for future in self._running.values():
                        future.set_exception(error)
                    self._running.clear()
                    continue
                for output in outputs:
                    future = self._running.pop(output.request_id, None) if output.finished else None
                    if future is not None and not future.done():
                        future.set_result(output)
                await asyncio.sleep(0)  # let new requests arrive between steps
        finally:
            if self._running:
                self.engine.abort_request(list(self._running))
                self._running.clear()
            self.lock.release()
