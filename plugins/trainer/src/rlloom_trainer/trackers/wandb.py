"""``wandb`` tracker: Weights & Biases, offline by default (files in ``<run_dir>/wandb``, no network).

``WANDB_MODE=online`` (with a login) syncs live instead; ``wandb sync <run_dir>/wandb/offline-run-*``
uploads an offline run later.
"""

from __future__ import annotations

import os

from rlloom_trainer.trackers.common import finite_scalars, library, run_name


class WandbTracker:
    """One wandb run per process, named after the run folder, with the resolved config attached."""

    def __init__(self, run_dir: str, config: dict) -> None:
        wandb = library("wandb", "wandb")
        os.makedirs(run_dir, exist_ok=True)
        self._run = wandb.init(
            project=os.environ.get("WANDB_PROJECT", "rlloom"),
            name=run_name(run_dir),
            dir=run_dir,
            config=config,
            mode=os.environ.get("WANDB_MODE", "offline"),
            settings=wandb.Settings(console="off", silent=True),
        )

    def log(self, metrics: dict[str, float], step: int) -> None:
        self._run.log(finite_scalars(metrics), step=step)

    def close(self) -> None:
        self._run.finish()
