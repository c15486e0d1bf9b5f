"""Entry point ``ray`` (group ``rlloom``): registers ``launcher=ray``."""

from __future__ import annotations

import rlloom
from rlloom_ray.config import RayLauncherConfig


@rlloom.hookimpl
def register_launchers(register):
    register("ray", "rlloom_ray.launcher:RayLauncher", config=RayLauncherConfig)
