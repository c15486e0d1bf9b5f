"""Entry point ``vllm`` (group ``rlloom``): registers the rollout engine ``rollout=vllm``."""

from __future__ import annotations

import rlloom
from rlloom import EngineSpec

from rlloom_vllm.config import VLLMRolloutConfig


def build_engine(cfg: VLLMRolloutConfig, spec: EngineSpec):
    """``factory(cfg, spec) -> VLLMRolloutEngine``; vLLM is imported only when an engine is built."""
    from rlloom_vllm.engine import VLLMRolloutEngine

    return VLLMRolloutEngine(cfg, spec)


@rlloom.hookimpl
def register_rollout_engines(register):
    register("vllm", build_engine, config=VLLMRolloutConfig)
