"""The ``launcher=ray`` config schema."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import ClassVar, Optional

from rlloom.config.limits import Limited

DEFAULT_POOL = "global"


@dataclass
class RayLauncherConfig(Limited):
    """The roles as Ray actors in resource pools (``launcher=ray``).

    - ``address``: a running Ray cluster to attach to (``"auto"``, ``"ray://host:10001"``); None
      starts a local one for the run (shut down with it). If Ray is already initialised in this
      process, that cluster is used and left running.
    - ``num_cpus``: logical CPUs of the local cluster (None: Ray counts the cores).
    - ``resource_pools``: pool name -> number of worker processes. The pool ``global`` (1 process)
      always exists unless redefined here; pools no role maps to start nothing.
    - ``mapping``: role (actor, ref, critic, rollout, reward, and the roles the algorithm declares, such
      as Safe-RLHF's cost and cost_critic) -> pool; unmapped roles go to ``global``.
      Roles mapped to the same pool share its processes (colocated); a pool of N processes forms
      one torch.distributed group of world size N (see ``gpus_per_worker``).
    - ``cpus_per_worker``: logical CPUs each worker reserves in its placement-group bundle.
    - ``gpus_per_worker``: GPUs each worker reserves (0: a CPU-only pool). Pools of GPU workers form
      their process group with NCCL for CUDA tensors (and gloo for CPU ones), CPU pools with gloo.
    - ``threads_per_worker``: torch intra-op threads in each worker (0: ``OMP_NUM_THREADS`` when
      set, else the whole CPUs its bundle reserves, ``cpus_per_worker`` rounded down, at least 1; so
      the workers of a node never run more threads than the CPUs Ray gave them; :mod:`rlloom_enginekit.threads`).
    - ``call_timeout_s``: longest wait for any worker call (and for a pool's placement group);
      past it the run stops with an error naming the role and rank.
    - ``connect_timeout_s``: how long an ``address`` of the form ``host:port`` or
      ``ray://host:port`` may take to accept a connection and answer as a gRPC server (as Ray's GCS and
      client server do) before the run stops naming it.
    """

    section: ClassVar[str] = "launcher"
    limits: ClassVar[dict] = {"cpus_per_worker": "> 0", "gpus_per_worker": ">= 0", "threads_per_worker": ">= 0",
                              "call_timeout_s": "> 0", "connect_timeout_s": "> 0"}

    address: Optional[str] = None
    num_cpus: Optional[int] = None
    resource_pools: dict[str, int] = field(default_factory=dict)
    mapping: dict[str, str] = field(default_factory=dict)
    cpus_per_worker: float = 1.0
    gpus_per_worker: float = 0.0
    threads_per_worker: int = 0
    call_timeout_s: float = 600.0
    connect_timeout_s: float = 15.0

    def __post_init__(self) -> None:
        super().__post_init__()
        for name, size in self.resource_pools.items():
            if size < 1:
                raise ValueError(f"launcher.resource_pools.{name}={size}: a pool needs at least 1 process")
        pools = self.pools()
        for role, pool in self.mapping.items():
            if pool not in pools:
                raise ValueError(f"launcher.mapping.{role}={pool}: no such pool; pools are {', '.join(sorted(pools))}")

    def check_roles(self, roles: list[str]) -> None:
        """ValueError for a ``mapping`` key that is not a role of the run (:class:`rlloom.protocols.ChecksRoles`)."""
        for role in self.mapping:
            if role not in roles:
                raise ValueError(f"launcher.mapping.{role}: unknown role; roles are {', '.join(roles)}")

    def pools(self) -> dict[str, int]:
        """Every pool: ``global`` (1 process) plus ``resource_pools``."""
        return {DEFAULT_POOL: 1, **self.resource_pools}

    def bundle(self) -> dict[str, float]:
        """The resources one worker reserves: its placement-group bundle."""
        return {"CPU": self.cpus_per_worker, **({"GPU": self.gpus_per_worker} if self.gpus_per_worker else {})}

    def process_group_backend(self) -> str:
        """The torch.distributed backend of a pool's group: for GPU workers NCCL for CUDA tensors
        and gloo for CPU ones (``cpu:gloo,cuda:nccl``), else ``gloo``."""
        return "cpu:gloo,cuda:nccl" if self.gpus_per_worker else "gloo"

    def pool_of(self, role: str) -> str:
        return self.mapping.get(role, DEFAULT_POOL)
