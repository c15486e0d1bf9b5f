"""Entry point ``megatron``: registers the train engine ``train_engine=megatron``.

The engine module is named, not imported: it loads when an engine is built, so registering the
plugin (and reporting a config error) stays cheap."""

from __future__ import annotations

import rlloom
from rlloom_megatron.config import MegatronConfig


@rlloom.hookimpl
def register_train_engines(register):
    register("megatron", "rlloom_megatron.engine:MegatronTrainEngine", config=MegatronConfig)
