"""Entry point ``sglang`` (group ``rlloom``): registers the rollout engine ``rollout=sglang``."""

from __future__ import annotations

import rlloom
from rlloom import EngineSpec

from rlloom_sglang.config import SGLangRolloutConfig


def build_engine(cfg: SGLangRolloutConfig, spec: EngineSpec):
    """``factory(cfg, spec)``: :class:`~rlloom_sglang.offline.SGLangOfflineEngine` with
    ``rollout.offline=true``, else :class:`~rlloom_sglang.engine.SGLangRolloutEngine` (a server)."""
    if cfg.offline:
        from rlloom_sglang.offline import SGLangOfflineEngine

        return SGLangOfflineEngine(cfg, spec)
    from rlloom_sglang.engine import SGLangRolloutEngine

    return SGLangRolloutEngine(cfg, spec)


@rlloom.hookimpl
def register_rollout_engines(register):
    register("sglang", build_engine, config=SGLangRolloutConfig)
