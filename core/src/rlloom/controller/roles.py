"""What every launcher (:class:`rlloom.protocols.Launcher`) shares: :func:`build_role` and the role errors."""

from __future__ import annotations

from typing import Any

from rlloom.plugins.registry import Registry
from rlloom.types import RoleSpec


def build_role(spec: RoleSpec, registry: Registry) -> Any:
    """``registry.build(kind, name, cfg[, engine])`` of ``spec``, with :func:`quiet_transformers` (the
    run's model folder has been fetched by then: the model source runs before any role)."""
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
