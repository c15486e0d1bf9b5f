"""Entry point ``fsdp``: registers the train engine ``train_engine=fsdp``.

The engine module is named, not imported: it loads when an engine is built, so registering the
plugin (and reporting a config error) stays cheap."""

from __future__ import annotations

import rlloom
from rlloom_fsdp.config import FSDPConfig


@rlloom.hookimpl
def register_train_engines(register):
    register("fsdp", "rlloom_fsdp.engine:FSDPTrainEngine", config=FSDPConfig)
