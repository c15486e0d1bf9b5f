"""A run's provenance: what :mod:`rlloom.provenance` says of the running code, and the distribution and
version of every option the run chose and of every tracker. Nothing here raises: what cannot be found
is ``"?"``."""

from __future__ import annotations

from typing import Any

import rlloom
from rlloom.config.compose import declared_role_groups
from rlloom.config.schema import NO_ROLE
from rlloom.plugins.registry import GROUPS, Registry
from rlloom.provenance import CORE, UNKNOWN, git_state, version_of


def option_origin(registry: Registry, group: str, option: str, roles: dict[str, list[str]]) -> dict[str, str]:
    """``{"distribution": ..., "version": ...}`` of the plugin that provides ``group=option`` (``roles``: the
    declared role groups, :func:`rlloom.config.compose.declared_role_groups`)."""
    if group in roles:
        if option == NO_ROLE:
            return {"distribution": CORE, "version": rlloom.__version__}
        group = "reward"  # a declared role is scored by a reward function
    component = registry.components[group].get(option) if group in GROUPS else None
    if component is not None:
        return {"distribution": component.distribution, "version": component.version}
    distribution = next((config.distribution for config in registry.configs
                         if config.group == group and config.name == option), UNKNOWN)
    return {"distribution": distribution, "version": version_of(distribution) if distribution != UNKNOWN else UNKNOWN}


def run_provenance(choices: dict[str, str], trackers: list[str], registry: Registry) -> dict[str, Any]:
    """What produced a run: the rlloom version, :func:`git_state`, and the origin (:func:`option_origin`)
    of every chosen option (``plugins``, by group) and tracker (``trackers``, by name)."""
    trackers_origin = {}
    for name in trackers:
        component = registry.components["tracker"].get(name)
        trackers_origin[name] = ({"distribution": component.distribution, "version": component.version}
                                 if component else {"distribution": UNKNOWN, "version": UNKNOWN})
    roles = declared_role_groups(registry)
    return {
        "rlloom": rlloom.__version__,
        **git_state(),
        "plugins": {group: option_origin(registry, group, option, roles) for group, option in choices.items()},
        "trackers": trackers_origin,
    }
