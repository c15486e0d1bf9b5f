"""The process behind one rank of a resource pool: hosts the roles placed there.

(Not named ``worker.py``: Ray hides traceback frames of any file whose path contains
``ray/worker.py``, which would hide this module's frames from remote error reports.)

A :class:`Worker` is started as a Ray actor. Roles are built inside it from a
:class:`~rlloom.types.RoleSpec` through the registry of the installed plugins, so nothing
but picklable descriptions crosses from the controller. Iterators that methods return (e.g.
``named_weights``) are turned into lists before they travel.

Fault seam (tests): ``RLLOOM_RAY_FAULT=<role>:<method>:<k>:<exit|raise|hang>[:<rank>]`` (forwarded from
the controller's environment, like every ``RLLOOM_*`` variable) makes the ``k``-th call of
``method`` on ``role`` (``build`` included) terminate the process (``exit``), raise ``RuntimeError`` (``raise``) or
never return (``hang``), on every rank of the role's pool or on rank ``rank`` only.

Partial rollouts (``trainer.partial_rollout``, :meth:`Worker.partial_rollouts`): the actor has a second Ray
concurrency group, :data:`LOADS`, one thread, in which :meth:`Worker.sync_load` runs while a generation runs in
the default one; the role's :class:`~rlloom_enginekit.partial.LoadGate` withdraws the generation's rows, swaps
the weights in the generation's thread and resumes them (:func:`rlloom_enginekit.partial.generate_partial`).
"""

from __future__ import annotations

import contextlib
import os
import socket
import threading
import time
from collections.abc import Iterator
from typing import Any

import torch
import torch.distributed as dist
from rlloom.controller.dispatch import declared_mode
from rlloom.controller.roles import build_role
from rlloom.plugins.registry import get_registry
from rlloom.types import RoleSpec, SyncStats
from rlloom_enginekit.threads import use_threads

FAULT_ENV = "RLLOOM_RAY_FAULT"
LOADS = "loads"  # the Ray concurrency group of the weight loads that interrupt a generation (trainer.partial_rollout)


def _fetched(value: Any) -> Any:
    """A Ray object reference's value (fetched from the object store); anything else as it is."""
    import ray

    return ray.get(value) if isinstance(value, ray.ObjectRef) else value


class Worker:
    """Rank ``rank`` of a pool of ``world_size`` processes."""

    def __init__(self, rank: int, world_size: int, num_threads: int, env: dict[str, str]) -> None:
        os.environ.update(env)
        use_threads(num_threads)
        self.rank, self.world_size = rank, world_size
        self.roles: dict[str, Any] = {}
        self.resharder: Any = None
        self.calls: dict[tuple[str, str], int] = {}
        self.gates: dict[str, Any] = {}  # role -> its LoadGate, once partial rollouts are on

    def rendezvous_address(self) -> tuple[str, int]:
        """This node's IP and a free TCP port there, for the pool's process group (asked of rank 0)."""
        with socket.socket() as sock:
            sock.bind(("", 0))
            port = sock.getsockname()[1]
        import ray

        return ray.util.get_node_ip_address(), port

    def init_process_group(self, host: str, port: int, backend: str) -> None:
        """Join the pool's group (the default group, which FSDP engines then shard over) with
        ``backend`` (``gloo``; ``cpu:gloo,cuda:nccl`` for GPU workers, each on the one GPU Ray gave it)."""
        if "nccl" in backend:
            torch.cuda.set_device(0)  # Ray sets CUDA_VISIBLE_DEVICES to this worker's GPU
        dist.init_process_group(backend, init_method=f"tcp://{host}:{port}", rank=self.rank,
                                world_size=self.world_size)

    def build(self, spec: RoleSpec) -> dict[str, str]:
        """Build ``spec.role`` here; returns the public methods of what was built (and ``__call__``
        when the object itself is callable, as a reward function is), each with its dispatch mode
        (:func:`rlloom.controller.dispatch.declared_mode`)."""
        self._maybe_fault(spec.role, "build")
        built = build_role(spec, get_registry())
        self.roles[spec.role] = built
        methods = [name for name in dir(built) if not name.startswith("_") and callable(getattr(built, name))]
        if callable(built):
            methods.append("__call__")
        return {name: declared_mode(built, name) for name in methods}

    def call(self, role: str, method: str, args: tuple, kwargs: dict, keep_result: bool = True) -> Any:
        """``roles[role].method(*args, **kwargs)``; object references among the arguments are
        fetched first (another group's result passed on); iterators come back as lists; None unless
        ``keep_result``."""
        self._maybe_fault(role, method)
        args = tuple(_fetched(arg) for arg in args)
        kwargs = {key: _fetched(value) for key, value in kwargs.items()}
        if method == "generate" and role in self.gates:
            from rlloom_enginekit.partial import generate_partial

            with self.gates[role].generating() as gate:
                result = generate_partial(self.roles[role], *args, gate=gate)
        else:
            result = getattr(self.roles[role], method)(*args, **kwargs)
        if isinstance(result, Iterator):
            result = list(result)
        return result if keep_result else None

    def timed_call(self, role: str, method: str, args: tuple, kwargs: dict,
                   keep_result: bool = True) -> tuple[Any, tuple[float, float]]:
        """:meth:`call` and the ``time.time()`` interval it ran in (two Ray returns: value, span)."""
        start = time.time()
        result = self.call(role, method, args, kwargs, keep_result)
        return result, (start, time.time())

    def stream_groups(self, role: str, prompts: Any, sampling: Any) -> Iterator[Any]:
        """A Ray streaming generator: the groups of the job ``(prompts, sampling)`` on ``roles[role]``
        (:func:`rlloom_enginekit.stream.generate_groups`, run in a thread of its own, gated under partial
        rollouts), each yielded as it finishes
        with ``meta["generated"]`` the call's ``(start, now)``; the call's error is raised after the groups sent."""
        import queue

        from rlloom_enginekit.stream import generate_groups

        self._maybe_fault(role, "stream_groups")
        finished: queue.Queue = queue.Queue()
        start = time.time()

        def send(_job: int, _row: int, group: Any) -> None:
            group.meta["generated"] = (start, time.time())
            finished.put(group)

        def run() -> None:
            gate = self.gates.get(role)
            try:
                with gate.generating() if gate else contextlib.nullcontext():
                    generate_groups(self.roles[role], [(_fetched(prompts), sampling)], send, gate)
                finished.put(None)
            except BaseException as error:  # noqa: BLE001 - raised by the generator, in Ray's thread
                finished.put(error)

        threading.Thread(target=run, name="rlloom-stream-groups", daemon=True).start()
        while (group := finished.get()) is not None:
            if isinstance(group, BaseException):
                raise group
            yield group

    def streams(self, role: str) -> str | None:
        """Why ``roles[role]`` cannot stream groups (:func:`rlloom_enginekit.stream_calls.check_streams`'s
        message), or None."""
        from rlloom_enginekit.stream_calls import check_streams

        try:
            check_streams(self.roles[role])
        except TypeError as error:
            return str(error)
        return None

    def partial_rollouts(self, role: str, version: int) -> str | None:
        """Turn partial rollouts on for ``roles[role]``, whose weights are ``version``; why it cannot
        (:func:`rlloom_enginekit.partial.check_interruptible`'s message), or None."""
        from rlloom_enginekit.partial import LoadGate, check_interruptible

        try:
            check_interruptible(self.roles[role])
        except TypeError as error:
            return str(error)
        self.gates[role] = LoadGate(version)
        return None

    def sync(self, spec: RoleSpec, train_role: str, rollout_role: str) -> SyncStats:
        """Run the resharder ``spec`` here, between two roles of this process (colocated sync)."""
        self._maybe_fault("resharder", "sync")
        return self._resharder(spec).sync(self.roles[train_role], self.roles[rollout_role])

    def sync_connect(self, spec: RoleSpec, rank: int, world_size: int, host: str, port: int) -> None:
        """Join the sync group of the distributed resharder ``spec`` as ``rank`` (split placement)."""
        self._maybe_fault("resharder", "connect")
        self._resharder(spec).connect(rank, world_size, host, port)

    def sync_send(self, spec: RoleSpec, train_role: str) -> SyncStats:
        """The distributed resharder's ``send`` of ``roles[train_role]`` (on every train rank)."""
        self._maybe_fault("resharder", "send")
        return self._resharder(spec).send(self.roles[train_role])

    def sync_receive(self, spec: RoleSpec, rollout_role: str) -> SyncStats:
        """The distributed resharder's ``receive`` into ``roles[rollout_role]`` (on every rollout rank)."""
        self._maybe_fault("resharder", "receive")
        return self._resharder(spec).receive(self.roles[rollout_role])

    def put_weights(self, role: str, keep_result: bool) -> Any:
        """``roles[role].named_weights()`` (a collective: every rank runs it) as a list of host
        tensors in the Ray object store (a GPU engine's are copied to host memory, so a process
        without that GPU can read them); its ObjectRef when ``keep_result``, else None."""
        import ray

        self._maybe_fault(role, "named_weights")
        weights = [(name, tensor.cpu()) for name, tensor in self.roles[role].named_weights()]
        return ray.put(weights) if keep_result else None

    def put_adapter(self, role: str, with_base: bool, keep_result: bool) -> Any:
        """``resharder.lora_sync=adapter`` between pools: ``roles[role]``'s LoRA adapter folder
        (:meth:`~rlloom_enginekit.lora.SyncsAdapters.write_adapter`, a collective, into a temporary folder) read into
        memory, with its base weights when ``with_base`` (the first sync; a collective too), in the Ray object store:
        a :class:`~rlloom_enginekit.resharder.StoredAdapter`'s arguments; its ObjectRef when ``keep_result``."""
        import tempfile

        import ray
        from rlloom_enginekit.lora import read_adapter_files

        self._maybe_fault(role, "write_adapter")
        engine = self.roles[role]
        base = [(name, tensor.cpu()) for name, tensor in engine.base_weights()] if with_base else None
        with tempfile.TemporaryDirectory(prefix="rlloom-adapter-") as folder:
            files = read_adapter_files(engine.write_adapter(folder))
        return ray.put({"files": files, "base": base}) if keep_result else None

    def sync_load(self, spec: RoleSpec, rollout_role: str, weights: list | dict,
                  version: int | None = None) -> SyncStats:
        """Run the resharder ``spec`` (``in_process``) here with what another process's train rank 0 put in the
        object store as the train side: ``weights``, (name, tensor) pairs (:meth:`put_weights`), or a
        :class:`~rlloom_enginekit.resharder.StoredAdapter`'s arguments (:meth:`put_adapter`), labelled ``version``
        for an engine that labels its weights (``rollout=server``). Under partial rollouts (called in
        :data:`LOADS`) through the role's gate."""
        gate = self.gates.get(rollout_role)
        if gate is not None:
            return gate.load(lambda: self._load(spec, rollout_role, weights, version), version)
        return self._load(spec, rollout_role, weights, version)

    def _load(self, spec: RoleSpec, rollout_role: str, weights: list | dict, version: int | None) -> SyncStats:
        from types import SimpleNamespace

        from rlloom_enginekit.resharder import StoredAdapter, labelled

        self._maybe_fault("resharder", "load")
        train = (StoredAdapter(**weights) if isinstance(weights, dict)
                 else SimpleNamespace(named_weights=lambda: iter(weights)))
        return self._resharder(spec).sync(train, labelled(self.roles[rollout_role], version))

    def _resharder(self, spec: RoleSpec) -> Any:
        """The resharder of this process, built from ``spec`` on first use."""
        if self.resharder is None:
            self.resharder = build_role(spec, get_registry())
        return self.resharder

    def _maybe_fault(self, role: str, method: str) -> None:
        fault = os.environ.get(FAULT_ENV)
        key = (role, method)
        self.calls[key] = self.calls.get(key, 0) + 1
        if not fault:
            return
        fault_role, fault_method, k, mode, *rank = fault.split(":")
        if (fault_role, fault_method) == key and self.calls[key] == int(k) and rank in ([], [str(self.rank)]):
            if mode == "exit":
                os._exit(1)
            if mode == "hang":
                threading.Event().wait()
            raise RuntimeError(f"{FAULT_ENV}: injected failure in {role}.{method} call {k}")
