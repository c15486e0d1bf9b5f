"""``launcher=local``, the default: every role is built in this process, and a role's handle is the
built object itself (:class:`rlloom.protocols.Launcher`); with ``trainer.async_mode`` other than ``sync`` the
rollout role gets a process of its own (:meth:`LocalLauncher.start_role_apart`)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, ClassVar

from rlloom.config.limits import Limited
from rlloom.controller.roles import build_role
from rlloom.plugins.registry import Registry
from rlloom.protocols import Closable
from rlloom.types import RoleSpec
from rlloom_enginekit.threads import available_cores, threads_for, use_threads

from rlloom_trainer.rollout_process import RolloutProcess


@dataclass
class LocalLauncherConfig(Limited):
    """``num_threads``: torch intra-op threads for this process (0: ``OMP_NUM_THREADS`` when set, else
    every core the process may run on; :mod:`rlloom_enginekit.threads`)."""

    section: ClassVar[str] = "launcher"
    limits: ClassVar[dict[str, str]] = {"num_threads": ">= 0"}

    num_threads: int = 0


class LocalLauncher:
    """Builds each role in-process and closes them, last built first, at :meth:`shutdown`."""

    def __init__(self, cfg: LocalLauncherConfig) -> None:
        use_threads(threads_for(cfg.num_threads, available_cores()))
        self._closables: list[object] = []

    def start_role(self, spec: RoleSpec, registry: Registry) -> Any:
        handle = build_role(spec, registry)
        self._closables.append(handle)
        return handle

    def start_role_apart(self, spec: RoleSpec) -> RolloutProcess:
        """``spec``'s role in a process of its own (:class:`~rlloom_trainer.rollout_process.RolloutProcess`),
        which takes half of this process's torch threads (rounded down, at least 1); this process keeps
        the rest (at least 1): with 2 threads, one core generates while the other trains."""
        import torch

        total = torch.get_num_threads()
        apart = max(1, total // 2)
        use_threads(max(1, total - apart))
        handle = RolloutProcess(spec, apart)
        self._closables.append(handle)
        return handle

    def shutdown(self) -> None:
        for handle in reversed(self._closables):
            if isinstance(handle, Closable):
                handle.close()
        self._closables.clear()
