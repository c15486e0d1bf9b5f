"""Settings for components that are not a config group's option (a tool of ``agent.tools``): a dict of
``{key: value}`` laid over the config dataclass the component registered (``register(name, factory,
config=...)``), checked as Hydra checks a group's option — an unknown key or a value of the wrong type
is a :class:`~rlloom.config.errors.ConfigError` naming ``<where>.<key>``; the dataclass's own
``__post_init__`` checks the values (its ValueError becomes a ConfigError too).

Torch-free: :func:`rlloom.config.compose.check_component_settings` runs these checks when the run's
config is composed, before anything heavy starts; the loop that builds the components
(:func:`build_with_settings`) makes their configs the same way.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import Any

from omegaconf import OmegaConf
from omegaconf.errors import OmegaConfBaseException

from rlloom.config.errors import ConfigError
from rlloom.plugins.registry import Component, Registry
from rlloom.suggest import did_you_mean


def component_config(component: Component, settings: Mapping[str, Any], where: str) -> Any:
    """``component``'s config dataclass with ``settings`` over its defaults; None when it registered no
    config (then ``settings`` must be empty). ``where``: how the user names the settings
    (``agent.tool_settings.python``), the prefix of every error's key."""
    schema = component.config
    if schema is None:
        if settings:
            raise ConfigError(f"{where}: {component.kind} {component.name} takes no settings.")
        return None
    valid = [field.name for field in dataclasses.fields(schema)]
    node = OmegaConf.structured(schema)
    for key, value in settings.items():
        if key not in valid:
            raise ConfigError(f"{where}.{key}: no such key of {component.kind} {component.name}. Valid keys: "
                              f"{', '.join(valid)}." + did_you_mean(str(key), valid))
        try:
            node[key] = value
        except OmegaConfBaseException as error:
            expected = {field.name: field.type for field in dataclasses.fields(schema)}[key]
            expected = getattr(expected, "__name__", expected)
            raise ConfigError(f"{where}.{key}={value}: invalid value (expected {expected}): "
                              f"{str(error).splitlines()[0]}") from None
    try:
        return OmegaConf.to_object(node)
    except (ValueError, TypeError, OmegaConfBaseException) as error:
        message = str(error)
        raise ConfigError(message if message.startswith(where) else f"{where}: {message}") from None


def build_with_settings(registry: Registry, kind: str, name: str, settings: Mapping[str, Any], where: str) -> Any:
    """The component ``name`` of ``kind``: ``factory(cfg)`` with ``cfg`` from :func:`component_config`
    when it registered a config, else ``factory()``."""
    component = registry.get(kind, name)
    cfg = component_config(component, settings, where)
    return component.factory() if cfg is None else component.factory(cfg)
