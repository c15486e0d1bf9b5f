"""Declarative range and choice checks for config dataclasses: a class lists ``limits: ClassVar[dict]``, key ->
rule, and names its ``section: ClassVar[str]``; :class:`Limited`'s ``__post_init__`` checks them (a class with
cross-key checks calls ``super().__post_init__()`` first). A rule is a range, ``">= 1"``, ``"> 0"``, ``"<= 1"``,
``"< 1"``, ``"in [0, 1]"`` / ``"in (0, 1]"`` (a parenthesis leaves that end open; ``inf`` allowed), or the valid
choices, any collection. None is not checked (an ``Optional`` key unset). Every key out of its limits is named as
typed, in one ValueError (``rollout.max_buckets=0: must be >= 1``). Limits merge over the bases, a subclass's rule
for a key replacing its base's."""

from __future__ import annotations

import dataclasses
import operator
import re
from collections.abc import Collection
from typing import Any, ClassVar

from rlloom.suggest import did_you_mean

_COMPARISONS = {">=": operator.ge, ">": operator.gt, "<=": operator.le, "<": operator.lt}
_INTERVAL = re.compile(r"in ([\[(])\s*(\S+?),\s*(\S+?)\s*([\])])")


def within(value: Any, rule: str) -> bool:
    """Whether ``value`` satisfies the range ``rule`` (see the module docstring); NaN satisfies none."""
    comparison, _, bound = rule.partition(" ")
    if comparison in _COMPARISONS:
        return bool(_COMPARISONS[comparison](value, float(bound)))
    interval = _INTERVAL.fullmatch(rule)
    if interval is None:
        raise ValueError(f"limit {rule!r}: write '>= x', '> x', '<= x', '< x' or 'in [a, b]' ('(' or ')' for an open end)")
    opening, low, high, closing = interval.groups()
    above = value >= float(low) if opening == "[" else value > float(low)
    below = value <= float(high) if closing == "]" else value < float(high)
    return bool(above and below)


def limits_of(cls: type) -> dict[str, Any]:
    """The class's ``limits``, merged over its bases (a subclass's rule for a key wins)."""
    merged: dict[str, Any] = {}
    for base in reversed(cls.__mro__):
        merged.update(vars(base).get("limits", {}))
    return merged


def limit_problems(config: Any, section: str) -> list[str]:
    """One phrase per key of ``config`` outside its limits, the key named ``<section>.<key>`` (with
    "or null" where the key may be None)."""
    problems = []
    nullable = {field.name for field in dataclasses.fields(config) if "Optional" in str(field.type)
                or "None" in str(field.type)} if dataclasses.is_dataclass(config) else set()
    for key, rule in limits_of(type(config)).items():
        value = getattr(config, key)
        if value is None:
            continue
        if isinstance(rule, str):
            if not within(value, rule):
                problems.append(f"{section}.{key}={value}: must be {rule}" + (" (or null)" if key in nullable else ""))
        elif value not in rule:
            problems.append(choice_problem(f"{section}.{key}", value, rule))
    return problems


def choice_problem(key: str, value: Any, choices: Collection[Any]) -> str:
    """``key=value: must be one of a, b, c`` (with a did-you-mean for a near miss)."""
    names = [str(choice) for choice in choices]
    return f"{key}={value}: must be one of {', '.join(names)}." + did_you_mean(str(value), names)


class Limited:
    """Mixin for config dataclasses whose ``limits`` are checked when they are built."""

    section: ClassVar[str] = ""
    limits: ClassVar[dict[str, Any]] = {}

    def __post_init__(self) -> None:
        problems = limit_problems(self, self.section)
        if problems:
            raise ValueError("; ".join(problems))
