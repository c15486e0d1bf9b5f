"""Entry point ``ray`` (group ``rlloom``): registers ``launcher=ray``."""

from __future__ import annotations

import rlloom


@rlloom.hookimpl
def register_launchers(register):
    from rlloom_ray.config import RayLauncherConfig
    from rlloom_ray.launcher import RayLauncher

    register("ray", RayLauncher, config=RayLauncherConfig)
