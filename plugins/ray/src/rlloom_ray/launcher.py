"""``launcher=ray``: roles run in Ray actors placed by resource pools.

Each pool (``launcher.resource_pools``, plus ``global`` of 1 process) becomes, when a role first
maps to it, a placement group of N bundles (``cpus_per_worker`` CPUs and ``gpus_per_worker`` GPUs
each, packed) and N :class:`~rlloom_ray.host.Worker` actors; with N > 1 they form one process group
(gloo, or NCCL for GPU workers). Roles
mapped to one pool share its processes. A role's handle dispatches its methods to the pool (see
:mod:`rlloom_ray.handles`); the resharder becomes a :class:`~rlloom_ray.sync.SyncHandle`.

Failures raise :class:`~rlloom_ray.errors.WorkerError`; :meth:`RayLauncher.shutdown` (called by the
trainer also after an error) closes healthy roles, kills every worker, frees the placement groups
and stops Ray if this launcher started it.
"""

from __future__ import annotations

import os
from typing import Any

from rlloom.controller.roles import build_role
from rlloom.plugins.registry import Registry
from rlloom.types import RoleSpec
from rlloom_enginekit.threads import threads_for

from rlloom_ray.config import RayLauncherConfig
from rlloom_ray.group import WorkerGroup
from rlloom_ray.handles import RoleHandle
from rlloom_ray.host import LOADS, Worker
from rlloom_ray.sync import SyncHandle

CLOSE_TIMEOUT_S = 30.0


class RayLauncher:
    def __init__(self, cfg: RayLauncherConfig) -> None:
        os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")
        import ray

        self.config = cfg
        self.started_ray = not ray.is_initialized()
        if self.started_ray:
            cfg.check_before_run()
            ray.init(address=cfg.address, num_cpus=cfg.num_cpus if cfg.address is None else None,
                     include_dashboard=False)
        self.groups: dict[str, WorkerGroup] = {}
        self.handles: list[RoleHandle] = []

    def start_role(self, spec: RoleSpec, registry: Registry) -> Any:
        """A handle for ``spec`` built on its pool's workers (the resharder: a :class:`SyncHandle`).
        On failure everything started so far is shut down before the error propagates."""
        try:
            if spec.role == "resharder":
                return SyncHandle(spec, build_role(spec, registry))
            group = self._group(self.config.pool_of(spec.role))
            modes = group.wait(spec.role, "build", [worker.build.remote(spec) for worker in group.workers],
                               **self._start_wait())[0]
            handle = RoleHandle(spec.role, group, modes, registry)
            self.handles.append(handle)
            return handle
        except BaseException:
            self.shutdown()
            raise

    def _group(self, pool: str) -> WorkerGroup:
        if pool in self.groups:
            return self.groups[pool]
        import ray
        from ray.util.placement_group import placement_group
        from ray.util.scheduling_strategies import PlacementGroupSchedulingStrategy

        size, cfg = self.config.pools()[pool], self.config
        if self.started_ray and cfg.address is None:
            self._check_fits(pool, size)
        placement = placement_group([cfg.bundle()] * size, strategy="PACK", name=f"rlloom-{pool}")
        ready, _ = ray.wait([placement.ready()], timeout=cfg.start_timeout_s)
        if not ready:
            from ray.util.placement_group import remove_placement_group

            remove_placement_group(placement)
            free = ray.available_resources()
            raise RuntimeError(
                f"launcher.resource_pools.{pool}: could not reserve {size} x {cfg.bundle()} within "
                f"launcher.start_timeout_s={cfg.start_timeout_s:g} s; the cluster has {free.get('CPU', 0):g} CPU and "
                f"{free.get('GPU', 0):g} GPU free (lower launcher.cpus_per_worker / "
                f"launcher.gpus_per_worker or raise launcher.num_cpus)"
            )
        env = {key: value for key, value in os.environ.items() if key.startswith("RLLOOM_")}
        remote = ray.remote(concurrency_groups={LOADS: 1})(Worker)  # LOADS: partial rollouts' weight loads
        workers = [
            remote.options(
                num_cpus=cfg.cpus_per_worker, num_gpus=cfg.gpus_per_worker, max_restarts=0,
                scheduling_strategy=PlacementGroupSchedulingStrategy(placement, placement_group_bundle_index=rank),
            ).remote(rank, size, threads_for(cfg.threads_per_worker, cfg.cpus_per_worker), env)
            for rank in range(size)
        ]
        group = self.groups[pool] = WorkerGroup(pool, workers, placement, cfg.call_timeout_s)
        if size > 1:
            host, port = group.wait("pool " + pool, "rendezvous_address", [workers[0].rendezvous_address.remote()],
                                    **self._start_wait())[0]
            group.wait("pool " + pool, "init_process_group",
                       [worker.init_process_group.remote(host, port, cfg.process_group_backend())
                        for worker in workers], **self._start_wait())
        return group

    def _check_fits(self, pool: str, size: int) -> None:
        """RuntimeError at once when ``size`` workers of ``pool`` do not fit beside the pools already started in
        the local cluster this run started: its resources are fixed, so its placement group would wait
        ``launcher.start_timeout_s`` for nothing."""
        import ray

        total, started = ray.cluster_resources(), sum(len(group.workers) for group in self.groups.values())
        for resource, each in self.config.bundle().items():
            if (started + size) * each > total.get(resource, 0) + 1e-9:
                pools = ", ".join(f"{name}: {len(group.workers)}" for name, group in self.groups.items())
                raise RuntimeError(
                    f"launcher.resource_pools.{pool}: {size} x {self.config.bundle()} do not fit the local Ray "
                    f"cluster this run started: {total.get(resource, 0):g} {resource} in all, {started * each:g} held "
                    f"by the pools started before it ({pools or 'none'}); raise launcher.num_cpus (logical CPUs "
                    f"may exceed the cores), lower launcher.cpus_per_worker or launcher.gpus_per_worker, or "
                    f"shrink the pools")

    def _start_wait(self) -> dict[str, Any]:
        """:meth:`WorkerGroup.wait`'s arguments for a start-up step (bounded by ``launcher.start_timeout_s``)."""
        return {"timeout_s": self.config.start_timeout_s, "setting": "launcher.start_timeout_s"}

    def shutdown(self) -> None:
        """Close the roles of healthy pools (last started first), kill all workers, stop Ray if ours."""
        import ray

        for handle in reversed(self.handles):
            group = handle._group
            if not group.failed and "close" in handle._methods:
                refs = [worker.call.remote(handle._role, "close", (), {}) for worker in group.workers]
                try:
                    group.wait(handle._role, "close", refs, timeout_s=min(group.timeout_s, CLOSE_TIMEOUT_S))
                except Exception:  # noqa: BLE001 - the workers are killed next either way
                    pass
        for group in self.groups.values():
            group.kill()
        self.handles.clear()
        self.groups.clear()
        if self.started_ray and ray.is_initialized():
            ray.shutdown()
            self.started_ray = False
