"""A run's name, ``trainer.run_name`` (default ``<algorithm>-<data>-<model>``: ``grpo-digits-tiny``), and its
folder, ``trainer.run_dir`` or ``runs/<run_name>``: re-running a command finds the folder and resumes the run."""

from __future__ import annotations

import os
from typing import Any

from omegaconf import DictConfig

from rlloom.errors import ConfigError

RUNS_DIR = "runs"


def default_run_name(choices: dict[str, str], model: Any = None) -> str:
    """``<algorithm>-<data>-<model>`` from the chosen options (``grpo-digits-tiny``); a model section with a
    ``path`` (``model=hf``) is named by the path's last part (``grpo-digits-Qwen2.5-0.5B``)."""
    path = str(getattr(model, "path", "") or "")
    parts = [choices["algorithm"], choices["data"], os.path.basename(os.path.normpath(path)) if path else choices["model"]]
    return "-".join(parts).replace(os.sep, "-")


def check_run_name(name: str) -> None:
    """ConfigError unless ``name`` can name a folder under ``runs/``: not empty, no path separator,
    not ``.`` or ``..``."""
    if not name or os.sep in name or name in (".", ".."):
        raise ConfigError(f"trainer.run_name={name!r}: a run name must be a folder name (no '{os.sep}', not '.' or "
                          f"'..'); the run's folder is {RUNS_DIR}/<run_name> unless trainer.run_dir is given.")


def name_run(cfg: DictConfig, sections: dict[str, Any], choices: dict[str, str]) -> None:
    """Fill an unset ``trainer.run_name`` (in ``cfg`` and the trainer section) with :func:`default_run_name`;
    check it either way."""
    trainer = sections["trainer"]
    if trainer.run_name is None:
        cfg.trainer.run_name = trainer.run_name = default_run_name(choices, sections.get("model"))
    check_run_name(trainer.run_name)


def run_dir_of(trainer: Any) -> str:
    """The run's folder: ``trainer.run_dir`` when set, else ``runs/<trainer.run_name>``."""
    return trainer.run_dir or os.path.join(RUNS_DIR, trainer.run_name)
