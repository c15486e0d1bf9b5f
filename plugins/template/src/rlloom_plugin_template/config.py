"""The plugin's config schemas, in a module that imports no torch: rlloom loads every plugin's entry point to
compose a config, so what the entry point imports is paid by every command, a config error included."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass
class ToyReinforceConfig:
    n: int = 4  # responses per prompt


@dataclass
class ToyLengthRewardConfig:
    max_chars: int = 3  # responses with at most this many characters (stripped) score 1
