"""Entry point ``fsdp``: registers the train engine ``train_engine=fsdp``."""

from __future__ import annotations

import rlloom
from rlloom_fsdp.config import FSDPConfig
from rlloom_fsdp.engine import FSDPTrainEngine


def build_engine(cfg: FSDPConfig, spec: rlloom.EngineSpec) -> FSDPTrainEngine:
    """``factory(cfg, spec) -> TrainEngine`` for the registry."""
    return FSDPTrainEngine(cfg, spec)


@rlloom.hookimpl
def register_train_engines(register):
    register("fsdp", build_engine, config=FSDPConfig)
