"""Entry point ``fsdp``: registers the train engine ``train_engine=fsdp``."""

from __future__ import annotations

import rlloom
from rlloom_fsdp.config import FSDPConfig


def build_engine(cfg: FSDPConfig, spec: rlloom.EngineSpec):
    """``factory(cfg, spec) -> TrainEngine`` for the registry. The engine module (transformers, FSDP)
    is imported only here, so registering the plugin — and reporting a config error — stays cheap."""
    from rlloom_fsdp.engine import FSDPTrainEngine

    return FSDPTrainEngine(cfg, spec)


@rlloom.hookimpl
def register_train_engines(register):
    register("fsdp", build_engine, config=FSDPConfig)
