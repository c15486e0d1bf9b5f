"""The ``launcher=ray`` config schema, and whether a Ray cluster answers at ``launcher.address``."""

from __future__ import annotations

import socket
from dataclasses import dataclass, field
from typing import ClassVar, Optional

from rlloom.config.limits import Limited

DEFAULT_POOL = "global"
LOCAL_ADDRESSES = (None, "auto", "local")  # no host:port to check: Ray starts a cluster or finds one here
HTTP2_PREFACE = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n"
HTTP2_EMPTY_SETTINGS = bytes([0, 0, 0, 4, 0, 0, 0, 0, 0])  # length 0, type SETTINGS, no flags, stream 0
HTTP2_SETTINGS_TYPE = 4


def host_and_port(address: str) -> tuple[str, int]:
    """``(host, port)`` of ``host:port`` or ``ray://host:port``; ValueError naming ``launcher.address`` otherwise."""
    host, _, port = address.removeprefix("ray://").rpartition(":")
    if not host or not port.isdigit():
        raise ValueError(f"launcher.address={address}: expected host:port, ray://host:port or auto")
    return host, int(port)


def check_reachable(address: str, timeout_s: float) -> None:
    """ConnectionError naming ``launcher.address`` unless a gRPC server (Ray's GCS, or its client server
    for ``ray://``) answers at its ``host:port`` within ``timeout_s``: the TCP connection must be accepted
    and, after the HTTP/2 client preface, the server's first frame must be a SETTINGS frame. Ray itself
    retries for a minute or more, and a firewall or proxy that accepts connections but never answers
    would otherwise hang the run that long."""
    problem = f"launcher.address={address}: no Ray cluster answers there within launcher.connect_timeout_s={timeout_s}"
    try:
        with socket.create_connection(host_and_port(address), timeout=timeout_s) as connection:
            connection.sendall(HTTP2_PREFACE + HTTP2_EMPTY_SETTINGS)
            header = connection.recv(9)
    except TimeoutError:
        raise ConnectionError(f"{problem} (it accepts connections but sends nothing back)") from None
    except OSError as error:
        raise ConnectionError(f"{problem} ({error or 'timed out'})") from None
    if len(header) < 4 or header[3] != HTTP2_SETTINGS_TYPE:
        raise ConnectionError(f"{problem}: what listens there does not speak gRPC (answered {header[:16]!r})")


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
    - ``start_timeout_s``: longest wait for a pool to start: its placement group, then its workers
      building a role (loading or converting the model) and forming their process group; past it the run
      stops with an error naming the role and rank.
    - ``call_timeout_s``: longest wait for any worker call once its role is built (generate, train_step,
      a weight sync, ...); past it the run stops with an error naming the role and rank.
    - ``connect_timeout_s``: how long an ``address`` of the form ``host:port`` or
      ``ray://host:port`` may take to accept a connection and answer as a gRPC server (as Ray's GCS and
      client server do) before the run stops naming it.
    """

    section: ClassVar[str] = "launcher"
    limits: ClassVar[dict] = {"cpus_per_worker": "> 0", "gpus_per_worker": ">= 0", "threads_per_worker": ">= 0",
                              "start_timeout_s": "> 0", "call_timeout_s": "> 0", "connect_timeout_s": "> 0"}

    address: Optional[str] = None
    num_cpus: Optional[int] = None
    resource_pools: dict[str, int] = field(default_factory=dict)
    mapping: dict[str, str] = field(default_factory=dict)
    cpus_per_worker: float = 1.0
    gpus_per_worker: float = 0.0
    threads_per_worker: int = 0
    start_timeout_s: float = 600.0
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
        if self.address not in LOCAL_ADDRESSES:
            host_and_port(self.address)

    def check_before_run(self) -> None:
        """ConnectionError naming ``launcher.address`` unless a Ray cluster answers there (:func:`check_reachable`;
        the run's start asks, before torch loads: :class:`rlloom.protocols.ChecksBeforeRun`)."""
        if self.address not in LOCAL_ADDRESSES:
            check_reachable(self.address, self.connect_timeout_s)

    def check_roles(self, roles: list[str]) -> None:
        """ValueError for a ``mapping`` key that is not a role of the run (:class:`rlloom.protocols.ChecksRoles`)."""
        for role in self.mapping:
            if role not in roles:
                raise ValueError(f"launcher.mapping.{role}: unknown role; roles are {', '.join(roles)}")

    def pools(self) -> dict[str, int]:
        """Every pool: ``global`` (1 process) plus ``resource_pools`` (:class:`rlloom.protocols.PlacesInPools`)."""
        return {DEFAULT_POOL: 1, **self.resource_pools}

    def bundle(self) -> dict[str, float]:
        """The resources one worker reserves: its placement-group bundle."""
        return {"CPU": self.cpus_per_worker, **({"GPU": self.gpus_per_worker} if self.gpus_per_worker else {})}

    def process_group_backend(self) -> str:
        """The torch.distributed backend of a pool's group: for GPU workers NCCL for CUDA tensors
        and gloo for CPU ones (``cpu:gloo,cuda:nccl``), else ``gloo``."""
        return "cpu:gloo,cuda:nccl" if self.gpus_per_worker else "gloo"

    def pool_of(self, role: str) -> str:
        """The pool that runs ``role``: its ``mapping``, else ``global`` (:class:`rlloom.protocols.PlacesInPools`)."""
        return self.mapping.get(role, DEFAULT_POOL)
