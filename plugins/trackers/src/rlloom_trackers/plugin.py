"""Registers the trackers: ``tensorboard``, ``wandb``, ``mlflow``."""

from __future__ import annotations

from rlloom import hookimpl


@hookimpl
def register_trackers(register):
    register("tensorboard", "rlloom_trackers.tensorboard:TensorBoardTracker")
    register("wandb", "rlloom_trackers.wandb:WandbTracker")
    register("mlflow", "rlloom_trackers.mlflow:MlflowTracker")
