"""Entry point ``resharders`` (group ``rlloom``): registers ``resharder=safetensors``, ``resharder=broadcast``
and ``resharder=shared``."""

from __future__ import annotations

import rlloom

from rlloom_resharders.config import BroadcastResharderConfig, SafetensorsResharderConfig, SharedResharderConfig


@rlloom.hookimpl
def register_resharders(register):
    register("safetensors", "rlloom_resharders.safetensors_dir:SafetensorsResharder", config=SafetensorsResharderConfig)
    register("broadcast", "rlloom_resharders.broadcast:BroadcastResharder", config=BroadcastResharderConfig)
    register("shared", "rlloom_resharders.shared:SharedResharder", config=SharedResharderConfig)
