"""A run's record of itself: ``config.yaml`` in its folder and in each checkpoint, and what
``rlloom train --print-config`` prints.

The record holds ``choices`` (group → chosen option), ``provenance`` (:func:`rlloom_trainer.provenance.run_provenance`:
rlloom's version, the git commit of its source tree, each chosen option's distribution and version), then
every section of the composed config with its values resolved, local paths made absolute (:func:`absolute_paths`),
so that the record means the same from any working folder. It is a config file
(:mod:`rlloom_trainer.config_files`): ``rlloom train --config <run_dir>/config.yaml`` composes the same config again
(``provenance`` is ignored on load).
"""

from __future__ import annotations

import os
import re
from typing import Any

import yaml
from omegaconf import OmegaConf
from rlloom.config.compose import ResolvedConfig
from rlloom.plugins.registry import Registry

from rlloom_trainer.provenance import run_provenance

CHOICES = "choices"
PROVENANCE = "provenance"
PATH_KEY = re.compile(r"(^|_)(path|dir|directory|root|files|resume|function)$")  # keys that may hold local paths
KEYWORDS = {"auto", "never"}  # values of such keys that name a mode, never a path (trainer.resume)


def absolute(value: str) -> str:
    """``value`` made absolute when it is a relative path that exists here, or ``file:name`` whose ``file``
    exists here (``reward.function``); anything else as it is (a hub model id, a module name, a keyword)."""
    if os.path.isabs(value) or value in KEYWORDS:
        return value
    if os.path.exists(value):
        return os.path.abspath(value)
    target, colon, name = value.rpartition(":")
    return os.path.abspath(target) + colon + name if colon and os.path.isfile(target) else value


def absolute_paths(section: Any) -> Any:
    """``section`` (nested dicts and lists) with every string under a key named like a path (``path``, ``*_dir``,
    ``*_files``, ``*_root``, ``resume``, ``function``, ...) made :func:`absolute`, resolved against the working
    folder the run started in."""
    if not isinstance(section, dict):
        return section
    resolved = {}
    for key, value in section.items():
        if isinstance(value, dict):
            resolved[key] = absolute_paths(value)
        elif PATH_KEY.search(str(key)) and isinstance(value, (str, list)):
            resolved[key] = absolute(value) if isinstance(value, str) else [
                absolute(item) if isinstance(item, str) else item for item in value]
        else:
            resolved[key] = value
    return resolved


def run_record(resolved: ResolvedConfig, registry: Registry) -> dict[str, Any]:
    """``{"choices": ..., "provenance": ..., <section>: {<key>: <value>}, ...}`` for ``resolved``."""
    sections = absolute_paths(OmegaConf.to_container(resolved.cfg, resolve=True, enum_to_str=True))
    trackers = list(resolved.sections["trainer"].trackers)
    return {CHOICES: dict(resolved.choices), PROVENANCE: run_provenance(resolved.choices, trackers, registry),
            **sections}


def record_yaml(resolved: ResolvedConfig, registry: Registry) -> str:
    """:func:`run_record` as YAML, in that order."""
    return yaml.safe_dump(run_record(resolved, registry), sort_keys=False)
