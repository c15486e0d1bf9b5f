"""The "did you mean" of an error message about a mistyped name."""

from __future__ import annotations

import difflib
from collections.abc import Iterable


def did_you_mean(name: str, choices: Iterable[str], cutoff: float = 0.6) -> str:
    """``" Did you mean 'x'?"`` naming the choices most similar to ``name`` (difflib's ratio, case
    ignored; all of them when several tie), or ``""`` when none reaches ``cutoff``."""
    ratios = {choice: difflib.SequenceMatcher(None, name.lower(), choice.lower()).ratio() for choice in choices}
    best = max(ratios.values(), default=0.0)
    if best < cutoff:
        return ""
    closest = sorted(choice for choice, ratio in ratios.items() if ratio == best)
    return f" Did you mean {' or '.join(repr(choice) for choice in closest)}?"
