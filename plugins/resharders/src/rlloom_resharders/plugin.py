"""Entry point ``resharders`` (group ``rlloom``): registers ``resharder=safetensors`` and ``resharder=broadcast``."""

from __future__ import annotations

import rlloom

from rlloom_resharders.config import BroadcastResharderConfig, SafetensorsResharderConfig


@rlloom.hookimpl
def register_resharders(register):
    register("safetensors", "rlloom_resharders.safetensors_dir:SafetensorsResharder", config=SafetensorsResharderConfig)
    register("broadcast", "rlloom_resharders.broadcast:BroadcastResharder", config=BroadcastResharderConfig)
