"""Per-row scoring shared by every reward function of this package.

A reward function supplies a ``verify`` callable that scores one row; :func:`score_rows` applies
it to every row, and a row on which ``verify`` raises is scored ``error_score``, gets 0.0 in
every component, is counted in ``RewardResult.num_errors`` and has its error message in
``info["error"]`` (``""`` for rows that scored normally). Errors never propagate.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence

from typing import TYPE_CHECKING

from rlloom_tasks.rewards.verdict import Verdict

if TYPE_CHECKING:
    from rlloom import RewardResult


def score_rows(
    rows: Iterable[tuple],
    verify: Callable[..., Verdict],
    *,
    components: Sequence[str],
    error_score: float,
) -> RewardResult:
    """Score ``verify(*row)`` for every row; see the module doc for how failures are handled.

    ``components`` names the components every :class:`Verdict` must carry; a verdict missing one
    counts as an error of that row.
    """
    scores: list[float] = []
    values: dict[str, list[float]] = {name: [] for name in components}
    errors: list[str] = []
    for row in rows:
        try:
            verdict = verify(*row)
            score = float(verdict.score)
            row_values = {name: float(verdict.components[name]) for name in components}
            error = ""
        except Exception as exc:  # noqa: BLE001 - a failing verifier scores the row, never the batch
            score, row_values = error_score, dict.fromkeys(components, 0.0)
            error = f"{type(exc).__name__}: {exc}"
        scores.append(score)
        for name in components:
            values[name].append(row_values[name])
        errors.append(error)
    import torch  # here: reward modules import this one when the plugin registers
    from rlloom import RewardResult

    return RewardResult(
        scores=torch.tensor(scores, dtype=torch.float32),
        components={name: torch.tensor(column, dtype=torch.float32) for name, column in values.items()},
        num_errors=sum(1 for error in errors if error),
        info={"error": errors},
    )
