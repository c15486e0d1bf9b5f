"""Entry point ``vllm``: registers the rollout engine ``rollout=vllm``.

The engine module is named, not imported: it loads when an engine is built, so registering the
plugin (and reporting a config error) stays cheap."""

from __future__ import annotations

import rlloom
from rlloom_vllm.config import VLLMRolloutConfig


@rlloom.hookimpl
def register_rollout_engines(register):
    register("vllm", "rlloom_vllm.engine:VLLMRolloutEngine", config=VLLMRolloutConfig)
