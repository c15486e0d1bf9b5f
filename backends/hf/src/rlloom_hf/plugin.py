"""Entry point ``hf``: registers the rollout engine ``rollout=hf``.

The engine module is named, not imported: it loads when an engine is built, so registering the
plugin (and reporting a config error) stays cheap."""

from __future__ import annotations

import rlloom
from rlloom_hf.config import HFRolloutConfig


@rlloom.hookimpl
def register_rollout_engines(register):
    register("hf", "rlloom_hf.engine:HFRolloutEngine", config=HFRolloutConfig)
