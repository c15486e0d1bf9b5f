"""Controller-side handles: a role's methods called on its pool's workers, as futures.

A :class:`RoleHandle` is a :class:`~rlloom.controller.futures.RemoteHandle`: ``submit_call`` spreads
the call over the pool's ranks by the method's dispatch mode (declared by the engine with
``@rlloom.dispatch``, see :mod:`rlloom.controller.dispatch`; modes are looked up in the registry, so
plugins can add their own) and returns a :class:`RayFuture` at once. Calling a method on the handle
(``handle.compute_log_probs(batch)``) submits and waits.

Arguments that several ranks share (a ``one_to_all`` call's) are put in the Ray object store once
and every rank gets the reference. A :class:`RayFuture` passed as an argument to another call
travels as its Ray object reference when its result is one rank's whole result (``one_to_all``,
``rank_zero``): the receiving worker fetches it from the object store, and the controller never
holds it. A result that must be put together from
several ranks (``dp_split``) is put together in the controller first.
"""

from __future__ import annotations

import functools
import time
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

import ray
import torch
from rlloom.batch import Batch
from rlloom.controller.dispatch import OneToAll
from rlloom.controller.futures import Completed
from rlloom.protocols import DispatchMode, RemoteHandle
from rlloom.plugins.registry import Registry

from rlloom_enginekit.dispatch import RolloutSplit
from rlloom_enginekit.stream_calls import GENERATE_STREAM, PARTIAL_ROLLOUTS, STREAM_GROUPS

from rlloom_ray.errors import WorkerError
from rlloom_ray.group import WorkerGroup

_UNSET = object()
STREAM_POLL_S = 1.0  # how long streamed(wait=True) waits on the running streams at a time


class RayFuture:
    """One call on a worker group, running. See :class:`rlloom.controller.futures.Future`.

    ``value_refs[i]`` / ``span_refs[i]``: rank ``i``'s result and ``(start, end)`` running time (None
    for a rank that sat the call out). Waiting follows :meth:`WorkerGroup.wait`: a rank that fails
    fails the call, and the group's ``timeout_s`` counts from submission.
    """

    def __init__(self, group: WorkerGroup, role: str, method: str, mode: DispatchMode, args: tuple, kwargs: dict,
                 value_refs: list[Any], span_refs: list[Any]) -> None:
        self.group, self.role, self.method, self.mode = group, role, method, mode
        self._args, self._kwargs = args, kwargs
        self.value_refs, self.span_refs = value_refs, span_refs
        self.submitted = time.monotonic()
        self._value: Any = _UNSET
        self._span: tuple[float, float] | None = None

    def _live(self) -> list[Any]:
        return [ref for ref in self.value_refs if ref is not None]

    def result(self) -> Any:
        if self._value is _UNSET:
            values = iter(self.group.wait(self.role, self.method, self._live(), started=self.submitted))
            results = [None if ref is None else next(values) for ref in self.value_refs]
            spans = ray.get([ref for ref in self.span_refs if ref is not None])
            self._span = (min(start for start, _ in spans), max(end for _, end in spans))
            self._value = self.mode.gather(results, self._args, self._kwargs)
            self._args = self._kwargs = None  # the batch pieces are no longer needed
        return self._value

    def span(self) -> tuple[float, float]:
        self.result()
        assert self._span is not None
        return self._span

    def object_ref(self) -> Any:
        """The object reference of the whole result when one rank's result is the result, else None."""
        return self.value_refs[0] if isinstance(self.mode, OneToAll) and self._value is _UNSET else None


def _sendable(value: Any, by_reference: bool) -> Any:
    """What an argument travels as: a :class:`RayFuture` as its object reference when ``by_reference``
    and it has one (else its result); a stream (generator, counting wrapper) as a list."""
    if isinstance(value, RayFuture):
        ref = value.object_ref() if by_reference else None
        return ref if ref is not None else value.result()
    if isinstance(value, Iterable) and not isinstance(value, (Batch, str, bytes, Mapping, Sequence, torch.Tensor)):
        return list(value)
    return value


class RoleHandle(RemoteHandle):
    """A role placed on a :class:`WorkerGroup`; has exactly the built object's public methods.

    ``modes``: method name -> dispatch mode name, as declared by the built object.
    """

    def __init__(self, role: str, group: WorkerGroup, modes: dict[str, str], registry: Registry) -> None:
        self._role, self._group = role, group
        self._modes = {method: registry.build("dispatch_mode", mode) for method, mode in modes.items()}
        self._streams: dict[Any, int] = {}  # the running generate_stream calls (Ray streaming generators): rank
        self.partial = False  # partial rollouts on (PARTIAL_ROLLOUTS): weight loads interrupt generations
        self.weight_version: int | None = None  # the version the next weight sync labels its weights with

    @property
    def _methods(self) -> frozenset[str]:
        return frozenset(self._modes)

    def __getattr__(self, name: str) -> Any:
        if name.startswith("_") or name not in self._modes:
            raise AttributeError(f"the {self._role} role (Ray pool {self._group.pool!r}) has no method {name!r}")
        return functools.partial(self._call_and_wait, name)

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        """Call the built object itself (a reward function's ``reward_fn(batch)``) on the pool."""
        if "__call__" not in self._modes:
            raise TypeError(f"the {self._role} role (Ray pool {self._group.pool!r}) is not callable")
        return self._call_and_wait("__call__", *args, **kwargs)

    def _call_and_wait(self, method: str, *args: Any, **kwargs: Any) -> Any:
        return self.submit_call(method, args, kwargs).result()

    def submit_call(self, method: str, args: tuple, kwargs: dict) -> RayFuture | Completed:
        if method in (GENERATE_STREAM, STREAM_GROUPS, PARTIAL_ROLLOUTS):
            return self._stream_call(method, args)
        if method not in self._modes:
            raise AttributeError(f"the {self._role} role (Ray pool {self._group.pool!r}) has no method {method!r}")
        mode = self._modes[method]
        by_reference = isinstance(mode, OneToAll)  # other modes look into their arguments here
        args = tuple(_sendable(arg, by_reference) for arg in args)
        kwargs = {key: _sendable(value, by_reference) for key, value in kwargs.items()}
        try:
            calls = mode.scatter(args, kwargs, len(self._group.workers))
        except (TypeError, ValueError) as error:
            raise type(error)(f"{self._role}.{method} on Ray pool {self._group.pool!r}: {error}") from None
        stored: dict[int, Any] = {}

        def once(value: Any) -> Any:
            """Arguments several ranks share go to the object store once, not once per rank."""
            if len(calls) == 1:
                return value
            if id(value) not in stored:
                stored[id(value)] = ray.put(value)
            return stored[id(value)]

        value_refs, span_refs = [], []
        for worker, call in zip(self._group.workers, calls):
            if call is None:
                value_refs.append(None)
                span_refs.append(None)
                continue
            value_ref, span_ref = worker.timed_call.options(num_returns=2).remote(
                self._role, method, once(call.args), once(call.kwargs), call.keep_result)
            value_refs.append(value_ref)
            span_refs.append(span_ref)
        return RayFuture(self._group, self._role, method, mode, args, kwargs, value_refs, span_refs)

    # ------------------------------------------------------------------ streamed groups (trainer.stream_groups)
    def _stream_call(self, method: str, args: tuple) -> Completed:
        """``stream_groups()`` or ``partial_rollouts(version)`` (check the engine on every rank, TypeError naming the
        key; the latter turns partial rollouts on: :meth:`rlloom_ray.host.Worker.partial_rollouts`) or
        ``generate_stream(prompts, sampling)`` (:meth:`_start_streams`; its groups come back through
        :meth:`streamed`): the calls of :mod:`rlloom_enginekit.stream_calls`."""
        workers, start = self._group.workers, time.time()
        if method in (STREAM_GROUPS, PARTIAL_ROLLOUTS):
            checks = [worker.streams.remote(self._role) if method == STREAM_GROUPS
                      else worker.partial_rollouts.remote(self._role, *args) for worker in workers]
            refused = next((why for why in self._group.wait(self._role, method, checks) if why), None)
            if refused:
                raise TypeError(refused)
            self.partial = self.partial or method == PARTIAL_ROLLOUTS
        else:
            self._start_streams(*args)
        return Completed(None, start, time.time())

    def _start_streams(self, prompts: Batch, sampling: Any) -> None:
        """The job's prompt rows split over the pool's ranks as ``dp_split_rollout`` splits a ``generate`` call
        (:class:`rlloom_enginekit.dispatch.RolloutSplit`: consecutive pieces, ranks beyond the number of prompts
        sitting out, each row keeping its prompt index), each piece a Ray streaming generator on its rank
        (:meth:`rlloom_ray.host.Worker.stream_groups`)."""
        calls = RolloutSplit().scatter((prompts, sampling), {}, len(self._group.workers))
        for rank, (worker, call) in enumerate(zip(self._group.workers, calls)):
            if call is not None:
                stream = worker.stream_groups.options(num_returns="streaming").remote(self._role, *call.args)
                self._streams[stream] = rank

    def streamed(self, wait: bool) -> list[Batch]:
        """The groups the ``generate_stream`` calls sent since the last call, every rank's merged: the calls' groups
        ready now, the call started first read first (so a job submitted under older weights comes before a later
        one's), each call's in the order sent; with ``wait``, at least one (blocks until one comes, for up to
        ``launcher.call_timeout_s``). A failed call (it raised, its worker died, no group came in time) is a
        :class:`~rlloom_ray.errors.WorkerError` naming its rank, raised here."""
        groups: list[Batch] = []
        deadline = time.monotonic() + self._group.timeout_s
        while True:
            for stream, rank in list(self._streams.items()):
                while ray.wait([stream], timeout=0)[0]:
                    try:
                        groups.append(self._group.get(self._role, rank, "stream_groups", next(stream)))
                    except StopIteration:
                        del self._streams[stream]
                        break
            if groups or not wait:
                return groups
            if not self._streams:
                raise WorkerError(self._role, 0, "stream_groups", "has no job running", "a group was waited for")
            if time.monotonic() > deadline:
                self._group.failed = True
                ranks = sorted(set(self._streams.values()))
                raise WorkerError(self._role, ranks[0], "stream_groups", f"did not answer within "
                                  f"{self._group.timeout_s:g} s", f"no group came from ranks {ranks} (pool "
                                  f"{self._group.pool!r}; see launcher.call_timeout_s)")
            ray.wait(list(self._streams), num_returns=1, timeout=STREAM_POLL_S)
