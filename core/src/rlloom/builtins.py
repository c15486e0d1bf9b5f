"""The core's own plugins, registered through the same hooks (and entry point) as any other."""

from __future__ import annotations

from rlloom.config.schema import TrainerConfig
from rlloom.plugins.hookspecs import hookimpl

BUILTIN_MODES = {"one_to_all": "OneToAll", "rank_zero": "RankZero"}  # mode -> factory in rlloom.controller.dispatch


@hookimpl
def register_dispatch_modes(register):
    for name, factory in BUILTIN_MODES.items():
        register(name, f"rlloom.controller.dispatch:{factory}")


@hookimpl
def register_configs(register):
    register("trainer", "default", TrainerConfig)
