"""The rollout role in a process of its own: how ``launcher=local`` places it when ``trainer.async_mode`` is
not ``sync`` (:mod:`rlloom_trainer.pipeline`), so that generation runs on its own cores while the trainer's
process trains.

:class:`RolloutProcess` is a :class:`~rlloom.protocols.RemoteHandle`: ``submit_call(method, args, kwargs)``
queues the call and returns a :class:`ProcessFuture` at once; the process runs its calls one at a time, in
the order submitted, so a weight update submitted after a generation takes effect after it. Tensors cross
through shared memory (``torch.multiprocessing``); ``update_weights`` sends copies, so that the trainer may
go on training while the process still generates with the weights it had.
"""

from __future__ import annotations

import os
import queue
import signal
import time
import traceback
from collections.abc import Iterable
from typing import Any

from rlloom.protocols import Closable
from rlloom.types import RoleSpec

READY = -1  # the call id of the process's first reply: the engine is built (or failed to build)
POLL_S = 1.0  # how often a wait checks that the other side is still alive
CLOSE_TIMEOUT_S = 30.0


class ProcessFuture:
    """One call on a :class:`RolloutProcess` (:class:`rlloom.protocols.Future`); its reply is kept once read."""

    def __init__(self, process: RolloutProcess, call_id: int) -> None:
        self._process, self._id = process, call_id
        self._reply: tuple[Any, tuple[float, float]] | None = None

    def result(self) -> Any:
        if self._reply is None:
            self._reply = self._process.reply(self._id)
        return self._reply[0]

    def span(self) -> tuple[float, float]:
        self.result()
        return self._reply[1]


class RolloutProcess:
    """The role ``spec`` built in a spawned process that computes with ``threads`` torch threads."""

    def __init__(self, spec: RoleSpec, threads: int) -> None:
        import torch.multiprocessing as mp

        context = mp.get_context("spawn")
        self._requests, self._replies = context.Queue(), context.Queue()
        self._process = context.Process(target=serve, args=(spec, threads, os.getpid(), self._requests,
                                                            self._replies), name=f"rlloom-{spec.role}", daemon=True)
        self._process.start()
        self._done: dict[int, tuple[Any, BaseException | None, tuple[float, float]]] = {}
        self._next_id = 0
        self._unchecked: list[ProcessFuture] = []  # calls nobody waits for (weight updates): checked at the next wait
        self.result_of(READY)

    def submit_call(self, method: str, args: tuple, kwargs: dict) -> ProcessFuture:
        call_id, self._next_id = self._next_id, self._next_id + 1
        self._requests.put((call_id, method, args, kwargs))
        return ProcessFuture(self, call_id)

    def reply(self, call_id: int) -> tuple[Any, tuple[float, float]]:
        """Call ``call_id``'s result and span; raises what it raised, or what an earlier unchecked call raised."""
        unchecked, self._unchecked = self._unchecked, []
        for future in unchecked:
            future.result()
        return self.result_of(call_id)

    def result_of(self, call_id: int) -> tuple[Any, tuple[float, float]]:
        while call_id not in self._done:
            try:
                done_id, value, error, span = self._replies.get(timeout=POLL_S)
            except queue.Empty:
                if not self._process.is_alive():
                    raise RuntimeError(f"the rollout process exited (code {self._process.exitcode}) "
                                       "before it answered") from None
                continue
            self._done[done_id] = (value, error, span)
        value, error, span = self._done.pop(call_id)
        if error is not None:
            raise error
        return value, span

    def generate(self, prompts: Any, sampling: Any) -> Any:
        return self.submit_call("generate", (prompts, sampling), {}).result()

    def update_weights(self, named_tensors: Iterable[tuple[str, Any]]) -> None:
        """Queue the load of copies of ``named_tensors``; returns without waiting (a failure is raised at the
        next wait on this process)."""
        copies = [(name, tensor.detach().clone()) for name, tensor in named_tensors]
        self._unchecked.append(self.submit_call("update_weights", (copies,), {}))

    def close(self) -> None:
        """Close the engine and end the process (killed if it has not ended within ``CLOSE_TIMEOUT_S``)."""
        if self._process.is_alive():
            self._requests.put(None)
            self._process.join(CLOSE_TIMEOUT_S)
        if self._process.is_alive():
            self._process.kill()
            self._process.join()


def serve(spec: RoleSpec, threads: int, parent: int, requests: Any, replies: Any) -> None:
    """The process's body: build ``spec``'s role, then run each request ``(id, method, args, kwargs)`` and put
    ``(id, value, error, (start, end))``, until ``None`` arrives or the parent ``parent`` is gone (killed).
    Ctrl-C is the trainer's to handle: this process ignores SIGINT."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    from rlloom.controller.roles import build_role
    from rlloom.plugins.registry import get_registry
    from rlloom_enginekit.threads import use_threads

    use_threads(threads)
    start = time.time()
    try:
        engine = build_role(spec, get_registry())
    except Exception as error:  # noqa: BLE001 - the trainer raises it
        replies.put((READY, None, portable(error), (start, time.time())))
        return
    replies.put((READY, None, None, (start, time.time())))
    while os.getppid() == parent:
        try:
            request = requests.get(timeout=POLL_S)
        except queue.Empty:
            continue
        if request is None:
            break
        call_id, method, args, kwargs = request
        start = time.time()
        try:
            value, error = getattr(engine, method)(*args, **kwargs), None
        except Exception as caught:  # noqa: BLE001 - the trainer raises it
            value, error = None, portable(caught)
        replies.put((call_id, value, error, (start, time.time())))
    if isinstance(engine, Closable):
        engine.close()


def portable(error: Exception) -> Exception:
    """``error`` if it survives pickling, else a RuntimeError carrying its traceback."""
    import pickle

    try:
        pickle.loads(pickle.dumps(error))
        return error
    except Exception:  # noqa: BLE001 - any pickling failure
        return RuntimeError("".join(traceback.format_exception(error)))
