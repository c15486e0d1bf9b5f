"""What one verifier call produces: the :class:`Verdict` it returns, or an error or a timeout.

:func:`call` is the single place where a verifier's exception is turned into an :class:`Outcome`,
both in-process and in pool workers, so a row gets the same outcome wherever it ran. Torch-free, so
that verifier modules and worker processes import it cheaply.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

OK, ERROR, TIMEOUT = "ok", "error", "timeout"


@dataclass(frozen=True)
class Verdict:
    """The score of one row and its named components."""

    score: float
    components: dict[str, float] = field(default_factory=dict)


class SampleTimeout(Exception):
    """Raised by a verifier whose own time budget ran out (e.g. a sandboxed program killed at its
    wall-clock limit): the row counts as a timeout, not as an error."""


@dataclass(frozen=True)
class Outcome:
    """``status`` is ``"ok"`` (``value`` holds the return value), ``"error"`` or ``"timeout"``
    (``message`` says why)."""

    status: str
    value: Any = None
    message: str = ""


def describe(exc: BaseException) -> str:
    return f"{type(exc).__name__}: {exc}"


def call(fn: Callable[..., Any], args: tuple) -> Outcome:
    """``fn(*args)`` as an :class:`Outcome`; :class:`SampleTimeout` → timeout, any other
    ``Exception`` → error. ``BaseException``\\ s that are not ``Exception``\\ s propagate."""
    try:
        return Outcome(OK, fn(*args))
    except SampleTimeout as exc:
        return Outcome(TIMEOUT, message=describe(exc))
    except Exception as exc:  # noqa: BLE001 - a failing verifier scores its row, never the batch
        return Outcome(ERROR, message=describe(exc))
