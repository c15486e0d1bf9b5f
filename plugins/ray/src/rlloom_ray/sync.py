"""The weight sync between a train role and the rollout role, placed where the two roles are."""

from __future__ import annotations

import dataclasses
import time
from typing import Any

import ray
from rlloom.protocols import DistributedResharder
from rlloom.types import RoleSpec, SyncStats
from rlloom_enginekit.resharder import InProcessResharder

from rlloom_ray.group import WorkerGroup
from rlloom_ray.handles import RoleHandle
from rlloom_ray.host import LOADS

Calls = list[tuple[WorkerGroup, str, str, list[Any]]]  # (group, role, method, one ref per rank)


def wait_together(calls: Calls, started: float) -> list[list[Any]]:
    """Results of calls on several groups that run at the same time (each in rank order), submitted
    at ``started`` (``time.monotonic()``); each group's timeout counts from then.

    The first call to fail, in completion order across all groups, is reported (through its
    group's :meth:`~rlloom_ray.group.WorkerGroup.wait`, so as a :class:`WorkerError` naming its role
    and rank) rather than a peer in another group left waiting on it; so is the first group still
    running at its deadline. Then every group is marked ``failed``: its ranks may be blocked in the
    collective with the failed one, so shutdown kills them without waiting on ``close``.
    """
    deadline = started + min(group.timeout_s for group, *_ in calls)
    owner = {ref: call for call in calls for ref in call[3]}
    while owner:
        ready, _ = ray.wait(list(owner), num_returns=1, timeout=max(deadline - time.monotonic(), 0.0))
        failed = None if ready else next(iter(owner.values()))  # past the deadline
        for ref in ready:
            call = owner.pop(ref)
            try:
                ray.get(ref)
            except Exception:  # noqa: BLE001 - raised as a WorkerError by the group's wait
                failed = call
                break
        if failed is not None:
            for group, *_ in calls:
                group.failed = True
            group, role, method, refs = failed
            group.wait(role, method, refs, started=started)  # raises
    return [group.wait(role, method, refs, started=started) for group, role, method, refs in calls]


class SyncHandle:
    """The resharder, placed where the two roles are.

    - Same pool (colocated): every rank of it runs the resharder in-process (``Worker.sync``), so
      weights never leave the process.
    - Different pools, a :class:`~rlloom.protocols.DistributedResharder` (``resharder=broadcast``):
      on the first sync, train rank 0 and every rollout rank form the sync group (train rank 0
      hosts the rendezvous); each sync then runs ``send`` on every train rank and ``receive`` on
      every rollout rank together. The stats are rollout rank 0's.
    - Different pools, ``resharder=in_process``: every train rank runs ``named_weights`` (a
      collective), rank 0 puts the result in the Ray object store (``Worker.put_weights``) and only
      its reference comes back; every rollout rank gets the reference and loads the tensors
      in-process (``Worker.sync_load``). The controller never holds the tensors. The stats count
      what rollout rank 0 loaded, over the controller's wall time of the whole sync. With
      ``resharder.lora_sync=adapter`` what goes through the object store is the adapter folder's files
      (and W0 at the first sync; ``Worker.put_adapter``), which each rollout rank writes and loads itself:
      no folder is shared between nodes. Under partial rollouts (``rollout.partial``) the load runs in each rollout
      worker's :data:`~rlloom_ray.host.LOADS` concurrency group, labelled ``rollout.weight_version``, so that the
      generation in flight is interrupted for it rather than waited for.
    - Otherwise (e.g. ``resharder=safetensors``) the resharder runs in the controller on the two
      handles: rank 0's full weights come back and are handed to the rollout role.
    """

    def __init__(self, spec: RoleSpec, local: Any) -> None:
        self.spec, self.local = spec, local
        self.connected = False
        self.syncs = 0  # syncs through the object store so far

    def sync(self, train: Any, rollout: Any) -> SyncStats:
        if not (isinstance(train, RoleHandle) and isinstance(rollout, RoleHandle)):
            return self.local.sync(train, rollout)
        if train._group is rollout._group:
            group = train._group
            refs = [worker.sync.remote(self.spec, train._role, rollout._role) for worker in group.workers]
            return group.wait("resharder", "sync", refs)[0]
        if isinstance(self.local, DistributedResharder):
            return self._broadcast(train, rollout)
        if isinstance(self.local, InProcessResharder):
            return self._through_object_store(train, rollout)
        return self.local.sync(train, rollout)

    def _broadcast(self, train: RoleHandle, rollout: RoleHandle) -> SyncStats:
        senders, receivers = train._group.workers, rollout._group.workers
        if not self.connected:
            host, port = train._group.wait(train._role, "rendezvous_address",
                                           [senders[0].rendezvous_address.remote()])[0]
            world_size, started = 1 + len(receivers), time.monotonic()
            wait_together([
                (train._group, train._role, "sync_connect",
                 [senders[0].sync_connect.remote(self.spec, 0, world_size, host, port)]),
                (rollout._group, rollout._role, "sync_connect",
                 [worker.sync_connect.remote(self.spec, 1 + rank, world_size, host, port)
                  for rank, worker in enumerate(receivers)]),
            ], started)
            self.connected = True
        started = time.monotonic()
        _, received = wait_together([
            (train._group, train._role, "sync_send",
             [worker.sync_send.remote(self.spec, train._role) for worker in senders]),
            (rollout._group, rollout._role, "sync_receive",
             [worker.sync_receive.remote(self.spec, rollout._role) for worker in receivers]),
        ], started)
        return received[0]

    def _through_object_store(self, train: RoleHandle, rollout: RoleHandle) -> SyncStats:
        start = time.perf_counter()
        train_group, rollout_group = train._group, rollout._group
        if self.local.adapters is not None:  # resharder.lora_sync=adapter: W0 at the first sync, then the adapters
            stored = train_group.wait(train._role, "write_adapter", [
                worker.put_adapter.remote(train._role, self.syncs == 0, rank == 0)
                for rank, worker in enumerate(train_group.workers)])[0]
        else:
            stored = train_group.wait(train._role, "named_weights", [
                worker.put_weights.remote(train._role, rank == 0) for rank, worker in enumerate(train_group.workers)])[0]
        self.syncs += 1
        group = {"concurrency_group": LOADS} if rollout.partial else {}  # a generation in flight takes them
        loads = [worker.sync_load.options(**group).remote(self.spec, rollout._role, stored, rollout.weight_version)
                 for worker in rollout_group.workers]
        loaded = rollout_group.wait(rollout._role, "sync_load", loads)[0]
        return dataclasses.replace(loaded, seconds=time.perf_counter() - start)
