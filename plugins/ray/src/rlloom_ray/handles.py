"""Controller-side handles: a role's methods called on its pool's workers, and the weight sync.

Dispatch modes (``DISPATCH`` maps a method name to one; plugins may add entries):

- :func:`one_to_all` (the default): every rank runs the call with the same arguments; rank 0's
  result is returned (the others drop theirs in the worker). ``named_weights``, a collective in
  FSDP engines, runs this way: all ranks gather, only rank 0's tensors travel back.
- :func:`dp_split`: the batch (first argument) is cut into ``world_size`` consecutive pieces whose
  sizes differ by at most one (:meth:`rlloom.Batch.chunk`), rank ``i`` gets piece ``i``; returned
  batches are concatenated in rank order (so row order is kept), other results come from rank 0
  (train engines all-reduce their metrics, so every rank returns the same). No padding is needed
  or added: train engines accept ranks with unequal row counts (FSDP engines run discarded passes
  to keep collectives in step), and padded rows would change the global counts that normalise
  the loss. A batch with fewer rows than ranks is refused.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any

import torch
from rlloom.batch import Batch
from rlloom.controller.local import RoleSpec
from rlloom.types import SyncStats

from rlloom_ray.group import WorkerGroup

Dispatch = Callable[[WorkerGroup, str, str, tuple, dict], Any]


def one_to_all(group: WorkerGroup, role: str, method: str, args: tuple, kwargs: dict) -> Any:
    refs = [worker.call.remote(role, method, args, kwargs, rank == 0) for rank, worker in enumerate(group.workers)]
    return group.wait(role, method, refs)[0]


def dp_split(group: WorkerGroup, role: str, method: str, args: tuple, kwargs: dict) -> Any:
    batch, rest = args[0], args[1:]
    world = len(group.workers)
    if len(batch) < world:
        raise ValueError(f"{role}.{method}: a batch of {len(batch)} rows cannot feed the {world} ranks of pool "
                         f"{group.pool!r}; every rank needs at least one row")
    pieces = batch.chunk(world)
    refs = [worker.call.remote(role, method, (piece, *rest), kwargs) for worker, piece in zip(group.workers, pieces)]
    results = group.wait(role, method, refs)
    return Batch.concat(results) if isinstance(results[0], Batch) else results[0]


DISPATCH: dict[str, Dispatch] = {
    "compute_log_probs": dp_split,
    "compute_values": dp_split,
    "train_step": dp_split,
}


def _sendable(value: Any) -> Any:
    """Streams (generators, counting wrappers) become lists: they cannot be iterated remotely."""
    if isinstance(value, Iterable) and not isinstance(value, (Batch, str, bytes, Mapping, Sequence, torch.Tensor)):
        return list(value)
    return value


class RoleHandle:
    """A role placed on a :class:`WorkerGroup`; has exactly the built object's public methods."""

    def __init__(self, role: str, group: WorkerGroup, methods: list[str]) -> None:
        self._role, self._group, self._methods = role, group, frozenset(methods)

    def __getattr__(self, name: str) -> Any:
        if name.startswith("_") or name not in self._methods:
            raise AttributeError(f"the {self._role} role (Ray pool {self._group.pool!r}) has no method {name!r}")
        return functools.partial(self._invoke, name)

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        """Call the built object itself (a reward function's ``reward_fn(batch)``) on the pool."""
        if "__call__" not in self._methods:
            raise TypeError(f"the {self._role} role (Ray pool {self._group.pool!r}) is not callable")
        return self._invoke("__call__", *args, **kwargs)

    def _invoke(self, method: str, *args: Any, **kwargs: Any) -> Any:
        dispatch = DISPATCH.get(method, one_to_all)
        args = tuple(_sendable(arg) for arg in args)
        kwargs = {key: _sendable(value) for key, value in kwargs.items()}
        return dispatch(self._group, self._role, method, args, kwargs)


class SyncHandle:
    """The resharder, placed where the two roles are.

    When train and rollout share a pool (colocated), every rank of it runs the resharder in-process
    (``Worker.sync``), so weights never leave the process. Otherwise the resharder runs in the
    controller on the two handles (e.g. ``resharder=safetensors``: rank 0's full weights are written
    to the directory, then handed to the rollout role).
    """

    def __init__(self, spec: RoleSpec, local: Any) -> None:
        self.spec, self.local = spec, local

    def sync(self, train: Any, rollout: Any) -> SyncStats:
        if isinstance(train, RoleHandle) and isinstance(rollout, RoleHandle) and train._group is rollout._group:
            group = train._group
            refs = [worker.sync.remote(self.spec, train._role, rollout._role) for worker in group.workers]
            return group.wait("resharder", "sync", refs)[0]
        return self.local.sync(train, rollout)
