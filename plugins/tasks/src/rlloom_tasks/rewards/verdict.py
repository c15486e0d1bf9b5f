"""The result of scoring one row. A module of its own, without torch, so that verifiers can be
imported cheaply (e.g. by reward worker processes)."""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass(frozen=True)
class Verdict:
    """The score of one row and its named components (every name the reward declares)."""

    score: float
    components: dict[str, float] = field(default_factory=dict)
