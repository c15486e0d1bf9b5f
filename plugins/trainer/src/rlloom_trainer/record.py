"""A run's record of itself: ``config.yaml`` in its folder and in each checkpoint, and what
``rlloom train --print-config`` prints.

The record holds ``choices`` (group → chosen option), ``provenance`` (:func:`rlloom_trainer.provenance.run_provenance`:
rlloom's version, the git commit of its source tree, each chosen option's distribution and version), then
every section of the composed config with its values resolved. It is a config file
(:mod:`rlloom_trainer.config_files`): ``rlloom train --config <run_dir>/config.yaml`` composes the same config again
(``provenance`` is ignored on load).
"""

from __future__ import annotations

from typing import Any

import yaml
from omegaconf import OmegaConf
from rlloom.config.compose import ResolvedConfig
from rlloom.plugins.registry import Registry

from rlloom_trainer.provenance import run_provenance

CHOICES = "choices"
PROVENANCE = "provenance"


def run_record(resolved: ResolvedConfig, registry: Registry) -> dict[str, Any]:
    """``{"choices": ..., "provenance": ..., <section>: {<key>: <value>}, ...}`` for ``resolved``."""
    sections = OmegaConf.to_container(resolved.cfg, resolve=True, enum_to_str=True)
    trackers = list(resolved.sections["trainer"].trackers)
    return {CHOICES: dict(resolved.choices), PROVENANCE: run_provenance(resolved.choices, trackers, registry),
            **sections}


def record_yaml(resolved: ResolvedConfig, registry: Registry) -> str:
    """:func:`run_record` as YAML, in that order."""
    return yaml.safe_dump(run_record(resolved, registry), sort_keys=False)
