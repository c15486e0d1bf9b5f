"""The embedded default launcher (every role lives in this process), and what every launcher shares:
:func:`build_role` and the role errors (the contract: :class:`rlloom.protocols.Launcher`)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from rlloom.plugins.registry import Registry
from rlloom.protocols import Closable
from rlloom.threads import available_cores, threads_for, use_threads
from rlloom.types import RoleSpec


def build_role(spec: RoleSpec, registry: Registry) -> Any:
    """``registry.build(kind, name, cfg[, engine])`` of ``spec``, with transformers' progress bars (its
    "Loading weights" bar per model) off in the building process, so the run's console shows the
    run's progress only. transformers' switch turns the Hugging Face Hub's download bars off too;
    the run's model folder has been fetched by then (the model source runs before any role)."""
    quiet_transformers()
    args = (spec.cfg,) if spec.engine is None else (spec.cfg, spec.engine)
    return registry.build(spec.kind, spec.name, *args)


def quiet_transformers() -> None:
    """Turn transformers' progress bars off in this process ("Loading weights", "Writing model
    shards"), so a run's console shows the run's progress only. It turns the Hugging Face Hub's
    download bars off too."""
    from transformers.utils import logging as transformers_logging

    transformers_logging.disable_progress_bar()


class RoleStartError(RuntimeError):
    """A role's engine, reward function or resharder could not be built; the message is one
    paragraph naming the role, the config choice and the cause (its first line), and the cause is
    chained for ``RLLOOM_DEBUG=1``."""

    def __init__(self, role: str, choice: str, cause: BaseException) -> None:
        first_line = (str(cause).strip().splitlines() or [""])[0]
        what = {"model": "the model source", "data": "the dataset"}.get(role, f"the {role} role")
        super().__init__(
            f"{what} ({choice}) could not start: {type(cause).__name__}: {first_line} "
            f"(set RLLOOM_DEBUG=1 for the traceback)"
        )


class RoleFailedError(RuntimeError):
    """A role failed while the run was going: its worker raised, died or stopped answering.
    Launchers that run roles elsewhere raise a subclass (``rlloom_ray.WorkerError``); the command
    line prints :meth:`summary` and exits with its own status (3)."""

    def summary(self) -> str:
        """One paragraph for the user: which role failed and the error's last line."""
        lines = [line.strip() for line in str(self).strip().splitlines() if line.strip()]
        return lines[0] if len(lines) < 2 else f"{lines[0]} {lines[-1]}"


@dataclass
class LocalLauncherConfig:
    """``num_threads``: torch intra-op threads for this process (0: ``OMP_NUM_THREADS`` when set, else
    every core the process may run on; :mod:`rlloom.threads`)."""

    num_threads: int = 0


class LocalLauncher:
    """Builds each role in-process; a role handle is the built object itself
    (:class:`rlloom.protocols.Launcher`)."""

    def __init__(self, cfg: LocalLauncherConfig) -> None:
        if cfg.num_threads < 0:
            raise ValueError(f"launcher.num_threads must be >= 0, got {cfg.num_threads}")
        use_threads(threads_for(cfg.num_threads, available_cores()))
        self._closables: list[object] = []

    def start_role(self, spec: RoleSpec, registry: Registry) -> Any:
        handle = build_role(spec, registry)
        self._closables.append(handle)
        return handle

    def shutdown(self) -> None:
        for handle in reversed(self._closables):
            if isinstance(handle, Closable):
                handle.close()
        self._closables.clear()
