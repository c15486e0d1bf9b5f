"""Entry point ``resharders`` (group ``rlloom``): registers ``resharder=safetensors``."""

from __future__ import annotations

import rlloom

from rlloom_resharders.safetensors_dir import SafetensorsResharder, SafetensorsResharderConfig


@rlloom.hookimpl
def register_resharders(register):
    register("safetensors", SafetensorsResharder, config=SafetensorsResharderConfig)
