"""The config side of declared roles (:class:`~rlloom.types.Role`): each reward role an installed algorithm
declares is a config group (``cost``), offering ``none`` and every reward function; a run chooses a function
exactly when its algorithm declares the role."""

from __future__ import annotations

from typing import Any

from rlloom.config.schema import NO_ROLE
from rlloom.errors import ConfigError
from rlloom.protocols import DeclaresRoles
from rlloom.types import STANDARD_ROLES, Role


def declared_roles(algorithm_config: Any) -> tuple[Role, ...]:
    """The roles an algorithm config (class or instance) adds to the standard ones."""
    return tuple(algorithm_config.extra_roles) if isinstance(algorithm_config, DeclaresRoles) else ()


def role_groups(algorithms: dict[str, Any], taken: set[str]) -> dict[str, list[str]]:
    """Config group -> the algorithms (by name) that declare it: one group per declared reward role,
    given the algorithms' config classes. ConfigError when a role's name is already a config group
    or a section of the run (``taken``)."""
    groups: dict[str, list[str]] = {}
    for name, schema in sorted(algorithms.items()):
        for role in declared_roles(schema):
            if role.kind != "reward":
                continue
            if role.name in taken:
                raise ConfigError(f"algorithm={name} declares the role {role.name!r}, whose config group would "
                                  f"replace the section {role.name}: the algorithm's plugin must rename the role.")
            groups.setdefault(role.name, []).append(name)
    return groups


def check_role_groups(choices: dict[str, str], groups: dict[str, list[str]], rewards: list[str]) -> None:
    """ConfigError unless every role group's choice is a function exactly when the chosen algorithm
    declares that role (``rewards``: the installed reward functions, its valid choices)."""
    algorithm = choices["algorithm"]
    for group, declaring in groups.items():
        if algorithm in declaring and choices[group] == NO_ROLE:
            raise ConfigError(f"algorithm={algorithm} declares the role {group}: choose the function that scores "
                              f"it with {group}=<name>, any installed reward function: {', '.join(rewards)}.")
        if algorithm not in declaring and choices[group] != NO_ROLE:
            raise ConfigError(f"{group}={choices[group]}: algorithm={algorithm} has no role {group}; remove the "
                              f"override ({group}={NO_ROLE}) or choose an algorithm that declares it: "
                              f"{', '.join(declaring)}.")


def run_role_names(algorithm_config: Any) -> list[str]:
    """Every role a run of this algorithm may have: the standard ones and those it declares."""
    return [*STANDARD_ROLES, *(role.name for role in declared_roles(algorithm_config))]
