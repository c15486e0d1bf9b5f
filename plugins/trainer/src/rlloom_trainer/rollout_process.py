"""The rollout role in a process of its own: how ``launcher=local`` places it when ``trainer.async_mode`` is
not ``sync`` (:mod:`rlloom_trainer.pipeline`), so that generation runs on its own cores while the trainer's
process trains.

:class:`RolloutProcess` is a :class:`~rlloom.protocols.RemoteHandle`: ``submit_call(method, args, kwargs)``
queues the call and returns a :class:`ProcessFuture` at once; the process runs its calls one at a time, in
the order submitted, so a weight update submitted after a generation takes effect after it; with partial
rollouts on (:class:`Worker`) a weight update interrupts the generation in flight instead. Tensors cross
through shared memory (``torch.multiprocessing``); ``update_weights`` sends copies, so that the trainer may
go on training while the process still generates with the weights it had. A ``generate_stream(prompts,
sampling)`` call (``trainer.stream_groups``) answers with each finished group as it completes
(:meth:`RolloutProcess.streamed`), and only with its error when it fails.

Every message is pickled by the side that sends it (:class:`Channel`): a request that cannot be pickled raises
in the trainer's ``submit_call``, and a reply that cannot be is answered with that error instead, raised in
the trainer, so that no message is lost in a queue's feeder thread while the other side waits for it; a request
the process cannot unpickle is answered with its error too (:data:`UNREADABLE`).
"""

from __future__ import annotations

import collections
import contextlib
import functools
import os
import pickle
import queue
import signal
import threading
import time
import traceback
from collections.abc import Iterable
from typing import TYPE_CHECKING, Any

from rlloom.protocols import Closable
from rlloom.types import RoleSpec
from rlloom_enginekit.resharder import AdapterFolders, labelled
from rlloom_enginekit.stream_calls import GENERATE_STREAM, PARTIAL_ROLLOUTS, STREAM_GROUPS

if TYPE_CHECKING:  # the streamed groups' and the gate's types; importing them here would load torch with the plugin
    from rlloom.batch import Batch
    from rlloom_enginekit.partial import LoadGate

READY = -1  # the call id of the process's first reply: the engine is built (or failed to build)
POLL_S = 1.0  # how often a wait checks that the other side is still alive
CLOSE_TIMEOUT_S = 30.0
LOADS_QUEUED = 2  # weight loads sent and not yet answered, at most (each holds a copy of the weights)
GROUP = -2  # the call id of a streamed group's reply
UNREADABLE = -3  # the call id of the reply to a request the process could not unpickle (its id unknown)


class Channel:
    """A queue between the trainer and the rollout process whose messages are pickled by :meth:`put`, in the
    sender's thread, as the queue's feeder thread would pickle them (torch's shared-memory reductions included)."""

    def __init__(self, line: Any) -> None:
        self.line = line

    def put(self, message: Any, what: str) -> None:
        """Send ``message``; a :class:`pickle.PicklingError` naming ``what`` and the pickler's error when it
        cannot be pickled (nothing is sent)."""
        from multiprocessing.reduction import ForkingPickler

        try:
            data = bytes(ForkingPickler.dumps(message))
        except Exception as error:  # noqa: BLE001 - pickling raises PicklingError, TypeError, AttributeError, ...
            raise pickle.PicklingError(f"{what} cannot be pickled to cross between the trainer and the rollout "
                                       f"process: {type(error).__name__}: {error}") from error
        self.line.put(data)

    def get(self, timeout: float) -> Any:
        """The next message, waiting up to ``timeout`` s (0: not at all); :class:`queue.Empty` when none came."""
        from multiprocessing.reduction import ForkingPickler

        return ForkingPickler.loads(self.line.get(timeout=timeout) if timeout else self.line.get_nowait())


class ProcessFuture:
    """One call on a :class:`RolloutProcess` (:class:`rlloom.protocols.Future`); its reply is kept once read."""

    def __init__(self, process: RolloutProcess, call_id: int) -> None:
        self._process, self.call_id = process, call_id
        self._reply: tuple[Any, tuple[float, float]] | None = None

    def result(self) -> Any:
        if self._reply is None:
            self._reply = self._process.reply(self.call_id)
        return self._reply[0]

    def span(self) -> tuple[float, float]:
        self.result()
        return self._reply[1]


class RolloutProcess:
    """The role ``spec`` built in a spawned process that computes with ``threads`` torch threads."""

    def __init__(self, spec: RoleSpec, threads: int) -> None:
        import torch.multiprocessing as mp

        context = mp.get_context("spawn")
        self._requests, self._replies = Channel(context.Queue()), Channel(context.Queue())
        self._process = context.Process(target=serve, args=(spec, threads, os.getpid(), self._requests,
                                                            self._replies), name=f"rlloom-{spec.role}", daemon=True)
        self._process.start()
        self._done: dict[int, tuple[Any, BaseException | None, tuple[float, float]]] = {}
        self._next_id = 0
        self._unchecked: list[int] = []  # calls nobody waits for (weight updates): checked once answered
        self._groups: list[Batch] = []  # streamed groups not yet handed on, in arrival order
        self.weight_version: int | None = None  # the version the next update_weights labels its weights with
        self.result_of(READY)

    def submit_call(self, method: str, args: tuple, kwargs: dict) -> ProcessFuture:
        call_id, self._next_id = self._next_id, self._next_id + 1
        self._requests.put((call_id, method, args, kwargs), f"the request {method} (call {call_id})")
        return ProcessFuture(self, call_id)

    def reply(self, call_id: int) -> tuple[Any, tuple[float, float]]:
        """Call ``call_id``'s result and span; raises what it raised, or what an unchecked call (a weight update)
        answered by then raised. Waits for ``call_id`` only: an update queued behind later calls is not waited
        for (the process answers in the order it runs, so one that ran before ``call_id`` is checked)."""
        answer = self.result_of(call_id)
        self._check_answered()
        return answer

    def result_of(self, call_id: int) -> tuple[Any, tuple[float, float]]:
        while call_id not in self._done:
            self._pump(POLL_S)
        value, error, span = self._done.pop(call_id)
        if error is not None:
            raise error
        return value, span

    def streamed(self, wait: bool) -> list[Batch]:
        """The groups streamed since the last call, in the order they finished; with ``wait``, at least one
        (blocks until one comes). A failed call's error is raised here, a failed weight update's as soon as its
        answer has come."""
        while True:
            self._check_answered()
            failed = next(((done_id, error) for done_id, (_, error, _) in self._done.items() if error), None)
            if failed is not None:
                del self._done[failed[0]]
                raise failed[1]
            if not self._pump(POLL_S if wait and not self._groups else 0.0) and (self._groups or not wait):
                groups, self._groups = self._groups, []
                return groups

    def _check_answered(self) -> None:
        """Forget the unchecked calls answered so far, raising the first one's error if one failed."""
        answered = [call_id for call_id in self._unchecked if call_id in self._done]
        self._unchecked = [call_id for call_id in self._unchecked if call_id not in self._done]
        errors = [self._done.pop(call_id)[1] for call_id in answered]
        failed = next((error for error in errors if error is not None), None)
        if failed is not None:
            raise failed

    def _pump(self, timeout: float) -> bool:
        """Move one reply, waiting up to ``timeout`` s (0: not at all), to the answered calls or the streamed
        groups; False when none came. A RuntimeError once the process has died or could not read a request."""
        try:
            done_id, value, error, span = self._replies.get(timeout)
        except queue.Empty:
            if not self._process.is_alive():
                raise RuntimeError(f"the rollout process exited (code {self._process.exitcode}) "
                                   "before it answered") from None
            return False
        if done_id == UNREADABLE:
            raise error
        if done_id == GROUP:
            self._groups.append(value)
        else:
            self._done[done_id] = (value, error, span)
        return True

    def generate(self, prompts: Any, sampling: Any) -> Any:
        return self.submit_call("generate", (prompts, sampling), {}).result()

    def update_weights(self, named_tensors: Iterable[tuple[str, Any]]) -> None:
        """Queue the load of copies of ``named_tensors``, labelled with :attr:`weight_version` when set;
        returns without waiting (a failure is raised by the first wait on this process once it ran), unless
        :data:`LOADS_QUEUED` loads are already queued: then it waits for the oldest to be answered, so that no
        more copies of the weights than that wait in the queue."""
        while len(self._unchecked) >= LOADS_QUEUED:
            self._pump(POLL_S)
            self._check_answered()
        copies = [(name, tensor.detach().clone()) for name, tensor in named_tensors]
        label = {} if self.weight_version is None else {"version": self.weight_version}
        self._unchecked.append(self.submit_call("update_weights", (copies,), label).call_id)

    def load_adapter(self, path: str, name: str) -> None:
        """Queue the load of the LoRA adapter folder ``path`` (``resharder.lora_sync=adapter``): its files are read
        now and the process loads a copy of its own under ``name`` after the generation in flight; returns without
        waiting (a failure is raised by the first wait on this process once it ran)."""
        from rlloom_enginekit.lora import read_adapter_files

        self._unchecked.append(self.submit_call("load_adapter", (read_adapter_files(path), name), {}).call_id)

    def close(self) -> None:
        """Close the engine and end the process (killed if it has not ended within ``CLOSE_TIMEOUT_S``)."""
        if self._process.is_alive():
            self._requests.put(None, "the request to stop")
            self._process.join(CLOSE_TIMEOUT_S)
        if self._process.is_alive():
            self._process.kill()
            self._process.join()


def serve(spec: RoleSpec, threads: int, parent: int, requests: Channel, replies: Channel) -> None:
    """The process's body: build ``spec``'s role, then run each request ``(id, method, args, kwargs)`` and put
    ``(id, value, error, (start, end))`` (:class:`Worker`), until ``None`` arrives or the parent ``parent`` is
    gone (killed). Ctrl-C is the trainer's to handle: this process ignores SIGINT."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    from rlloom.controller.roles import build_role
    from rlloom.plugins.registry import get_registry
    from rlloom_enginekit.threads import use_threads

    use_threads(threads)
    start = time.time()
    try:
        engine = build_role(spec, get_registry())
    except Exception as error:  # noqa: BLE001 - the trainer raises it
        replies.put((READY, None, portable(error), (start, time.time())), "the engine's error")
        return
    replies.put((READY, None, None, (start, time.time())), "the ready reply")
    worker = Worker(engine, replies)
    worker.listen(requests, parent)
    while (request := worker.next_request()) is not None:
        worker.run(request)
    worker.adapters.close()
    if isinstance(engine, Closable):
        engine.close()


class Worker:
    """Runs the requests of a rollout process on its ``engine``, in the order they arrive, read from the
    queue by a thread of their own (:meth:`listen`).

    Partial rollouts (``trainer.partial_rollout``), from the request ``partial_rollouts(version)`` on (the
    weights the engine holds being ``version``): the reader hands each ``update_weights`` request to ``gate``, a
    :class:`~rlloom_enginekit.partial.LoadGate` (as a Ray rollout worker hands its loads), which runs it before
    any waiting request, withdrawing the generation in flight (:func:`rlloom_enginekit.partial.generate_partial`)
    and resuming it. Without it a weight update waits for the generation before it. An engine that labels its
    weights (:class:`~rlloom_enginekit.resharder.LabelsWeights`, ``rollout=server``) gets each update's ``version``."""

    def __init__(self, engine: Any, replies: Channel) -> None:
        self.engine, self.replies = engine, replies
        self.gate: LoadGate | None = None  # partial rollouts: weight loads interrupt the request in flight
        self._waiting: collections.deque = collections.deque()
        self._arrived = threading.Condition()
        self.adapters = AdapterFolders(None)  # the LoRA adapters RolloutProcess.load_adapter sends
        self._joined: list[tuple] | None = None  # the requests of the streamed call in flight

    def listen(self, requests: Channel, parent: int) -> None:
        """Move the requests from ``requests`` to the waiting line (under partial rollouts a weight update to the
        gate), in a thread, appending ``None`` once the process ``parent`` is gone. A request that cannot be
        unpickled here is answered with an :data:`UNREADABLE` reply carrying the error."""

        def read() -> None:
            while True:
                try:
                    request = requests.get(POLL_S)
                except queue.Empty:
                    if os.getppid() == parent:
                        continue
                    request = None
                except Exception as error:  # noqa: BLE001 - the trainer raises it
                    unreadable = RuntimeError(f"the rollout process could not unpickle a request: "
                                              f"{type(error).__name__}: {error}")
                    self.answer(UNREADABLE, None, unreadable, time.time(), "the unreadable request's error")
                    continue
                if self.gate is not None and request is not None and request[1] == "update_weights":
                    self.gate.submit(functools.partial(self._run, request), request[3].get("version"))
                    continue
                with self._arrived:
                    self._waiting.append(request)
                    self._flag_if_joins_wait()
                    self._arrived.notify()
                if request is None:
                    return

        threading.Thread(target=read, name="rlloom-rollout-requests", daemon=True).start()

    def next_request(self) -> tuple | None:
        """The next request to run; ``None``: stop."""
        with self._arrived:
            while not self._waiting:
                self._arrived.wait()
            return self._waiting.popleft()

    def run(self, request: tuple) -> None:
        """Run ``request`` and put its reply; under partial rollouts a weight load that arrives meanwhile waits
        for its swap (a generation) or its end."""
        with self.gate.generating() if self.gate is not None else contextlib.nullcontext():
            self._run(request)

    def _run(self, request: tuple) -> None:
        """:meth:`run`'s work; a ``generate_stream`` runs with the ones waiting right after it."""
        call_id, method, args, kwargs = request
        if method == GENERATE_STREAM:
            self._stream([request, *self._streams_waiting()])
            return
        start = time.time()
        try:
            value, error = self._call(method, args, kwargs), None
        except Exception as caught:  # noqa: BLE001 - the trainer raises it
            value, error = None, portable(caught)
        self.answer(call_id, value, error, start, f"the reply to {method} (call {call_id})")

    def answer(self, call_id: int, value: Any, error: Exception | None, start: float, what: str) -> None:
        """Put the reply ``(call_id, value, error, (start, now))``; one that cannot be pickled is answered with
        the :class:`pickle.PicklingError` naming ``what`` instead (raised in the trainer)."""
        span = (start, time.time())
        try:
            self.replies.put((call_id, value, error, span), what)
        except pickle.PicklingError as unsendable:
            self.replies.put((call_id, None, unsendable, span), what)

    def _streams_waiting(self) -> list[tuple]:
        """The ``generate_stream`` requests at the head of the waiting line, taken out of it."""
        with self._arrived:
            taken = []
            while self._waiting and self._waiting[0] and self._waiting[0][1] == GENERATE_STREAM:
                taken.append(self._waiting.popleft())
            return taken

    def _stream(self, requests: list[tuple]) -> None:
        """The ``generate_stream`` ``requests`` as one engine call
        (:func:`rlloom_enginekit.stream.generate_groups`): each group put as a :data:`GROUP` reply as it
        finishes; a failed call answers each request with its error (raised by :meth:`RolloutProcess.streamed`).
        Under partial rollouts this worker is the call's :class:`~rlloom_enginekit.stream.StreamGate`: weight
        updates and ``generate_stream`` requests that arrive withdraw it, and the latter join it (:meth:`more`)."""
        from rlloom_enginekit.stream import generate_groups

        start = time.time()

        def send(job: int, row: int, group: Any) -> None:
            group.meta["generated"] = (start, time.time())
            self.replies.put((GROUP, group, None, group.meta["generated"]), f"the streamed group of row {row} of "
                             f"job {job}")

        self._joined = requests
        try:
            generate_groups(self.engine, [request[2] for request in requests], send, self if self.gate else None)
        except Exception as caught:  # noqa: BLE001 - the trainer raises it
            for request in self._joined:
                self.answer(request[0], None, portable(caught), start, f"the error of {GENERATE_STREAM}")
        finally:
            self._joined = None

    def _call(self, method: str, args: tuple, kwargs: dict) -> Any:
        from rlloom_enginekit.partial import LoadGate, check_interruptible, generate_partial
        from rlloom_enginekit.stream_calls import check_streams

        if method == STREAM_GROUPS:
            return check_streams(self.engine)
        if method == PARTIAL_ROLLOUTS:
            check_interruptible(self.engine)
            self.gate = LoadGate(args[0])
            return None
        if method == "update_weights":
            labelled(self.engine, kwargs.get("version")).update_weights(*args)
            return None
        if method == "load_adapter":
            return self.adapters.load(self.engine, *args)
        if method == "generate" and self.gate is not None:
            return generate_partial(self.engine, *args, gate=self.gate)
        return getattr(self.engine, method)(*args, **kwargs)

    # ------------------------------------------------------------------ StreamGate (partial rollouts, streamed)
    @property
    def version(self) -> int:
        """The version of the weights the engine holds (the gate's)."""
        return self.gate.version

    def watch(self, cancelled: Any) -> None:
        """The gate's ``watch``; a ``generate_stream`` request waiting to join sets ``cancelled`` too."""
        self.gate.watch(cancelled)
        with self._arrived:
            self._flag_if_joins_wait()

    def swap(self) -> None:
        """Run the waiting weight updates, in order (the gate's)."""
        self.gate.swap()

    def more(self) -> list[tuple]:
        """The ``generate_stream`` requests waiting at the head of the line, joining the streamed call in flight:
        their prompts and sampling."""
        joining = self._streams_waiting()
        self._joined += joining
        return [request[2] for request in joining]

    def _flag_if_joins_wait(self) -> None:
        """Flag the gated streamed call in flight when a ``generate_stream`` request waits at the head of the line
        (call under the lock)."""
        head = self._waiting[0] if self._waiting else None
        if self.gate is not None and self._joined is not None and head is not None and head[1] == GENERATE_STREAM:
            self.gate.interrupt()


def portable(error: Exception) -> Exception:
    """``error`` if it survives pickling, else a RuntimeError carrying its traceback."""
    import pickle

    try:
        pickle.loads(pickle.dumps(error))
        return error
    except Exception:  # noqa: BLE001 - any pickling failure
        return RuntimeError("".join(traceback.format_exception(error)))
