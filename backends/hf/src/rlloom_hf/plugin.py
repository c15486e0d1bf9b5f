"""Entry point ``hf`` (group ``rlloom``): registers the rollout engine ``rollout=hf``."""

from __future__ import annotations

import rlloom
from rlloom import EngineSpec

from rlloom_hf.config import HFRolloutConfig


def build_engine(cfg: HFRolloutConfig, spec: EngineSpec):
    """``factory(cfg, spec) -> HFRolloutEngine``; transformers is imported only when an engine is built."""
    from rlloom_hf.engine import HFRolloutEngine

    return HFRolloutEngine(cfg, spec)


@rlloom.hookimpl
def register_rollout_engines(register):
    register("hf", build_engine, config=HFRolloutConfig)
