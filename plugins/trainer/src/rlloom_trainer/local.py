"""``launcher=local``, the default: every role is built in this process, and a role's handle is the
built object itself (:class:`rlloom.protocols.Launcher`), a reward function's wrapped so that a call that
raises ends the run as a failed role (:class:`RewardRole`); with ``trainer.async_mode`` other than ``sync`` the
rollout role gets a process of its own (:meth:`LocalLauncher.start_role_apart`)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, ClassVar

from rlloom.config.limits import Limited
from rlloom.controller.roles import build_role
from rlloom.errors import RoleFailedError
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

    num_threads: int = 0  # torch threads of this process; 0: OMP_NUM_THREADS, else every allowed core


class RewardRole:
    """A reward function built in this process whose call, when it raises, ends the run as a failed role does on
    Ray: :class:`~rlloom.errors.RoleFailedError` naming the role, the component and the error's first line (the
    command line prints it in one paragraph, exit status 3; the error is chained for ``RLLOOM_DEBUG=1``). A reward
    must score a row it cannot check (:class:`rlloom.protocols.RewardFn`); one that raises instead stops the run.
    Other attributes are the function's."""

    def __init__(self, function: Any, spec: RoleSpec) -> None:
        self.function, self.spec = function, spec

    def __call__(self, batch: Any) -> Any:
        try:
            return self.function(batch)
        except Exception as error:
            first_line = (str(error).strip().splitlines() or [""])[0]
            raise RoleFailedError(f"the {self.spec.role} role's reward function {self.spec.name!r} raised "
                                  f"{type(error).__name__}: {first_line}") from error

    def __getattr__(self, name: str) -> Any:
        return getattr(self.function, name)


class LocalLauncher:
    """Builds each role in-process and closes them, last built first, at :meth:`shutdown`."""

    def __init__(self, cfg: LocalLauncherConfig) -> None:
        use_threads(threads_for(cfg.num_threads, available_cores()))
        self._closables: list[object] = []

    def start_role(self, spec: RoleSpec, registry: Registry) -> Any:
        handle = build_role(spec, registry)
        self._closables.append(handle)
        return RewardRole(handle, spec) if spec.kind == "reward" else handle

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
