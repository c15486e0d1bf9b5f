"""Config files: ``rlloom train --config FILE [overrides…]``.

A config file is a YAML mapping of

- ``choices``: group → option (``{algorithm: grpo, data: digits}``), i.e. ``algorithm=grpo data=digits``;
- ``preset``: a preset's name, i.e. ``preset=<name>``;
- ``<section>``: a mapping of that section's keys (``trainer: {total_steps: 30}``), i.e.
  ``trainer.total_steps=30``; a value may be a list or a mapping (``launcher: {resource_pools: {global: 2}}``);
- ``provenance``: ignored (a run's recorded ``config.yaml`` holds it, :mod:`rlloom_trainer.record`).

The file stands for those overrides, placed before the command line's, so the command line wins. Every
error is a :class:`ConfigError` naming the file: a missing file, bad YAML, a top-level key that is none of
the above, and the composition's own errors about a key the file sets (an unknown key, a bad value).
"""

from __future__ import annotations

from typing import Any

import yaml
from rlloom.config.compose import ResolvedConfig, compose_config, run_sections
from rlloom.errors import ConfigError
from rlloom.plugins.registry import get_registry
from rlloom.suggest import did_you_mean

from rlloom_trainer.record import CHOICES, PROVENANCE

PRESET = "preset"


def top_level_keys() -> list[str]:
    """The keys a config file may have: ``choices``, ``preset``, every section of a run (those of the
    roles the installed algorithms declare included) and ``provenance``."""
    return [CHOICES, PRESET, *run_sections(get_registry()), PROVENANCE]


def hydra_value(value: object) -> str:
    """``value`` (from a resolved config) written in Hydra's override grammar."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, (int, float)):
        return repr(value)
    if isinstance(value, (list, tuple)):
        return "[" + ",".join(hydra_value(item) for item in value) + "]"
    if isinstance(value, dict):
        return "{" + ",".join(f"{key}:{hydra_value(item)}" for key, item in value.items()) + "}"
    return "'" + str(value).replace("\\", "\\\\").replace("'", "\\'") + "'"


def _read(path: str) -> dict[str, Any]:
    try:
        with open(path, encoding="utf-8") as handle:
            data = yaml.safe_load(handle)
    except FileNotFoundError:
        raise ConfigError(f"--config {path}: no such file.") from None
    except OSError as error:
        raise ConfigError(f"--config {path}: cannot be read: {error.strerror}.") from None
    except yaml.YAMLError as error:
        where = getattr(error, "problem_mark", None)
        line = f" (line {where.line + 1})" if where is not None else ""
        problem = getattr(error, "problem", None) or str(error).splitlines()[0]
        raise ConfigError(f"{path}: not valid YAML{line}: {problem}.") from None
    if data is None:
        return {}
    if not isinstance(data, dict):
        raise ConfigError(f"{path}: a config file must be a mapping of {', '.join(top_level_keys())}; "
                          f"got a {type(data).__name__}.")
    return data


def file_overrides(path: str) -> list[str]:
    """The overrides the config file ``path`` stands for (see the module docstring)."""
    overrides, top_level = [], top_level_keys()
    for key, value in _read(path).items():
        key = str(key)
        if key == PROVENANCE:
            continue
        if key not in top_level:
            raise ConfigError(f"{path}: {key}: no such key. Top-level keys of a config file are: "
                              f"{', '.join(top_level)}." + did_you_mean(key, top_level))
        if key == PRESET:
            overrides.append(f"{PRESET}={value}")
            continue
        if not isinstance(value, dict):
            hint = f" (choose an option under {CHOICES}: {{{key}: {value}}})" if key != CHOICES else ""
            raise ConfigError(f"{path}: {key}: expected a mapping of keys, got {value!r}{hint}.")
        if key == CHOICES:
            overrides += [f"{group}={option}" for group, option in value.items()]
        else:
            overrides += [f"{key}.{name}={hydra_value(item)}" for name, item in value.items()]
    return overrides


def _names_key(message: str, key: str) -> bool:
    """Whether a composition error ``message`` is about ``key`` (messages start with the key)."""
    return message.startswith(key) and message[len(key):len(key) + 1] in (":", "=", ".", " ")


def compose_with_file(path: str | None, overrides: list[str]) -> ResolvedConfig:
    """:func:`compose_config` of the config file ``path``'s overrides (none without a file) followed by
    ``overrides``; a composition error about a key the file sets, and the command line does not, names the
    file."""
    if path is None:
        return compose_config(overrides)
    from_file = file_overrides(path)
    try:
        return compose_config(from_file + list(overrides))
    except ConfigError as error:
        message = str(error)
        own = {override.split("=", 1)[0].lstrip("+~") for override in overrides}
        keys = {override.split("=", 1)[0] for override in from_file} - own
        if any(_names_key(message, key) for key in keys):
            raise ConfigError(f"{path}: {message}") from None
        raise
