"""Registers the trackers: ``tensorboard``, ``wandb``, ``mlflow``."""

from __future__ import annotations

from rlloom import hookimpl
from rlloom_trackers.mlflow import MlflowTracker
from rlloom_trackers.tensorboard import TensorBoardTracker
from rlloom_trackers.wandb import WandbTracker


@hookimpl
def register_trackers(register):
    register("tensorboard", TensorBoardTracker)
    register("wandb", WandbTracker)
    register("mlflow", MlflowTracker)
