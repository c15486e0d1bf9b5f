"""What every launcher (:class:`rlloom.protocols.Launcher`) shares: :func:`build_role` (errors: rlloom.errors)."""

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
    """Turn transformers' (and the Hugging Face Hub's) progress bars off in this process, so a run's console
    shows the run's progress only."""
    from transformers.utils import logging as transformers_logging

    transformers_logging.disable_progress_bar()
