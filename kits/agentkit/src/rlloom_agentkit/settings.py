"""What an agent config checks against the installed plugins, and the tools it builds.

The names an agent config lists (``agent.tools``, ``agent.environment``) must be registered, and
``agent.tool_settings`` (a dict of ``{key: value}`` per tool) is laid over the config dataclass the tool
registered (``register(name, factory, config=...)``), checked as Hydra checks a group's option: an
unknown key or a value of the wrong type is a ValueError naming ``<where>.<key>``; the dataclass's own
``__post_init__`` checks the values. Torch-free: the config runs these checks when the run's config
is composed (:class:`rlloom.protocols.ChecksInstalled`), before anything heavy starts; the loop that
builds the tools (:func:`build_with_settings`) makes their configs the same way.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import Any

from omegaconf import OmegaConf
from omegaconf.errors import OmegaConfBaseException

from rlloom.plugins.registry import Component, Registry
from rlloom.suggest import did_you_mean


def component_config(component: Component, settings: Mapping[str, Any], where: str) -> Any:
    """``component``'s config dataclass with ``settings`` over its defaults; None when it registered no
    config (then ``settings`` must be empty). ``where``: how the user names the settings
    (``agent.tool_settings.python``), the prefix of every error's key."""
    schema = component.config
    if schema is None:
        if settings:
            raise ValueError(f"{where}: {component.kind} {component.name} takes no settings.")
        return None
    valid = [field.name for field in dataclasses.fields(schema)]
    node = OmegaConf.structured(schema)
    for key, value in settings.items():
        if key not in valid:
            raise ValueError(f"{where}.{key}: no such key of {component.kind} {component.name}. Valid keys: "
                              f"{', '.join(valid)}." + did_you_mean(str(key), valid))
        try:
            node[key] = value
        except OmegaConfBaseException as error:
            expected = {field.name: field.type for field in dataclasses.fields(schema)}[key]
            expected = getattr(expected, "__name__", expected)
            raise ValueError(f"{where}.{key}={value}: invalid value (expected {expected}): "
                              f"{str(error).splitlines()[0]}") from None
    try:
        return OmegaConf.to_object(node)
    except (ValueError, TypeError, OmegaConfBaseException) as error:
        message = str(error)
        raise ValueError(message if message.startswith(where) else f"{where}: {message}") from None


def build_with_settings(registry: Registry, kind: str, name: str, settings: Mapping[str, Any], where: str) -> Any:
    """The component ``name`` of ``kind``: ``factory(cfg)`` with ``cfg`` from :func:`component_config`
    when it registered a config, else ``factory()``."""
    component = registry.get(kind, name)
    cfg = component_config(component, settings, where)
    return component.factory() if cfg is None else component.factory(cfg)


def check_names(registry: Registry, kind: str, names: list[str], where: str) -> None:
    """ValueError unless every name of ``names`` is a registered ``kind`` (the message, as for any unknown
    name, lists the installed ones and the package that provides it)."""
    for name in names:
        if name not in registry.components[kind]:
            _, _, reason = registry.missing_message(kind, str(name)).partition(": ")
            raise ValueError(f"{where}={name}: {reason}")


def check_tool_settings(registry: Registry, tools: list[str], settings: Mapping[str, Any], where: str) -> None:
    """ValueError unless each entry of ``settings`` names a tool of ``tools`` and fits its registered config."""
    for name, values in settings.items():
        if name not in tools:
            raise ValueError(f"{where}.{name}: {name} is not in agent.tools ({', '.join(tools) or 'empty'}); settings "
                             "apply only to the tools the run uses." + did_you_mean(name, tools))
        component_config(registry.get("tool", name), values, f"{where}.{name}")
