"""Entry point ``resharders`` (group ``rlloom``): registers ``resharder=safetensors`` and ``resharder=broadcast``."""

from __future__ import annotations

import rlloom

from rlloom_resharders.broadcast import BroadcastResharder, BroadcastResharderConfig
from rlloom_resharders.safetensors_dir import SafetensorsResharder, SafetensorsResharderConfig


@rlloom.hookimpl
def register_resharders(register):
    register("safetensors", SafetensorsResharder, config=SafetensorsResharderConfig)
    register("broadcast", BroadcastResharder, config=BroadcastResharderConfig)
