"""Entry point ``megatron``: registers the train engine ``train_engine=megatron``."""

from __future__ import annotations

import rlloom
from rlloom_megatron.config import MegatronConfig


def build_engine(cfg: MegatronConfig, spec: rlloom.EngineSpec):
    """``factory(cfg, spec) -> TrainEngine`` for the registry (imports megatron-core only now)."""
    from rlloom_megatron.engine import MegatronTrainEngine

    return MegatronTrainEngine(cfg, spec)


@rlloom.hookimpl
def register_train_engines(register):
    register("megatron", build_engine, config=MegatronConfig)
