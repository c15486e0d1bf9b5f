"""Reward execution: score rows in-process or in a process pool, with a per-sample timeout.

A reward supplies ``verify(*row) -> Verdict`` (:class:`rlloom_tasks.rewards.scoring.Verdict`: a
score and named components) and a list of rows; :class:`RowScorer` turns them into a
:class:`~rlloom.RewardResult`:

- ``num_workers == 0``: rows run one after another in this process. With ``timeout_s > 0`` each
  call is interrupted by ``SIGALRM`` after ``timeout_s`` seconds (Python code only: a call stuck
  inside a C extension is interrupted when it returns to Python); this needs the main thread.
- ``num_workers >= 1``: rows run in a :class:`~rlloom_rewards.pool.WorkerPool`; a call still
  running after ``timeout_s`` seconds has its worker killed.

A row whose ``verify`` raises, returns something that is not a :class:`Verdict`, or whose score or
components are not finite numbers is an **error**: scored ``error_score`` and counted in ``num_errors``.
A row that runs out of time (or whose verifier raises
:class:`~rlloom_rewards.outcome.SampleTimeout`) is a **timeout**: scored ``timeout_score`` and
counted in ``num_timeouts``. Nothing propagates.

Components are the union of the names of every verdict, in sorted order; a row that lacks a name
(an error, a timeout, or a verdict without it) gets 0.0 there. ``info`` holds per row ``status``
(``"ok"``, ``"error"``, ``"timeout"``) and ``error`` (the message, ``""`` when ok). Scores do not
depend on ``num_workers`` (for verifiers that do not themselves depend on the process they run in).
"""

from __future__ import annotations

import contextlib
import math
import signal
import threading
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from rlloom_tasks.rewards.scoring import Verdict

from rlloom_rewards.outcome import ERROR, OK, TIMEOUT, Outcome, call, describe
from rlloom_rewards.pool import WorkerPool

if TYPE_CHECKING:  # annotations only: the plugin registers without torch
    from rlloom import Batch, RewardResult


@dataclass
class ExecutionConfig:
    """How a reward runs its verifier (fields shared by every reward of this package)."""

    num_workers: int = 0  # 0: in this process; n: a pool of n worker processes
    timeout_s: float = 0.0  # per-sample wall-clock limit; 0: none
    error_score: float = 0.0  # score of a row whose verifier raised
    timeout_score: float = 0.0  # score of a row that ran out of time

    def __post_init__(self) -> None:
        if self.num_workers < 0:
            raise ValueError(f"reward.num_workers must be >= 0 (0: in-process), got {self.num_workers}")
        if self.timeout_s < 0 or math.isnan(self.timeout_s):
            raise ValueError(f"reward.timeout_s must be >= 0 (0: no limit), got {self.timeout_s}")


def response_rows(batch: Batch, *, with_extra: bool) -> list[tuple]:
    """``(response_text, ground_truth)`` per row, plus ``extra`` (``{}`` when the batch has none)
    when ``with_extra``: the rows most verifiers of this package take."""
    batch.require("response_text", "ground_truth")
    columns = [batch["response_text"], batch["ground_truth"]]
    if with_extra:
        columns.append(batch["extra"] if "extra" in batch else [{}] * len(batch))
    return list(zip(*columns, strict=True))


class _Expired(BaseException):
    """Raised by the alarm handler; a BaseException so that a verifier's ``except Exception`` does
    not swallow it."""


@contextlib.contextmanager
def _alarm(timeout_s: float) -> Iterator[None]:
    """Raise :class:`_Expired` in the block after ``timeout_s`` seconds (``<= 0``: never)."""
    if timeout_s <= 0:
        yield
        return

    def expire(signum, frame):
        raise _Expired

    previous = signal.signal(signal.SIGALRM, expire)
    signal.setitimer(signal.ITIMER_REAL, timeout_s)
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)


def call_with_timeout(fn: Callable, args: tuple, timeout_s: float) -> Outcome:
    """:func:`~rlloom_rewards.outcome.call` of ``fn(*args)`` in this process, interrupted after
    ``timeout_s`` seconds."""
    try:
        with _alarm(timeout_s):
            return call(fn, args)
    except _Expired:
        return Outcome(TIMEOUT, message=f"no result within timeout_s={timeout_s}")


class RowScorer:
    """Runs a verifier over rows as :class:`ExecutionConfig` says; see the module doc."""

    def __init__(self, cfg: ExecutionConfig) -> None:
        self.cfg = cfg
        self._pool: WorkerPool | None = None

    def outcomes(self, verify: Callable[..., Verdict], rows: Sequence[tuple]) -> list[Outcome]:
        """The raw outcome of ``verify(*row)`` for every row, in order."""
        if self.cfg.num_workers == 0:
            if self.cfg.timeout_s > 0 and threading.current_thread() is not threading.main_thread():
                raise RuntimeError(
                    "reward.timeout_s needs the main thread when reward.num_workers=0 (it uses SIGALRM); "
                    "set reward.num_workers >= 1 to score in worker processes"
                )
            return [call_with_timeout(verify, tuple(row), self.cfg.timeout_s) for row in rows]
        if self._pool is None:
            self._pool = WorkerPool(self.cfg.num_workers)
        return self._pool.map(verify, rows, self.cfg.timeout_s)

    def score(self, verify: Callable[..., Verdict], rows: Sequence[tuple]) -> RewardResult:
        return self.result(self.outcomes(verify, rows))

    def result(self, outcomes: Sequence[Outcome]) -> RewardResult:
        """The :class:`~rlloom.RewardResult` of per-row outcomes whose values are verdicts."""
        import torch
        from rlloom import RewardResult

        rows = [self._checked(outcome) for outcome in outcomes]
        names = sorted({name for outcome, _, components in rows if outcome.status == OK for name in components})
        scores = [score for _, score, _ in rows]
        return RewardResult(
            scores=torch.tensor(scores, dtype=torch.float32),
            components={
                name: torch.tensor([components.get(name, 0.0) for _, _, components in rows], dtype=torch.float32)
                for name in names
            },
            num_errors=sum(outcome.status == ERROR for outcome, _, _ in rows),
            num_timeouts=sum(outcome.status == TIMEOUT for outcome, _, _ in rows),
            info={
                "status": [outcome.status for outcome, _, _ in rows],
                "error": [outcome.message for outcome, _, _ in rows],
            },
        )

    def _checked(self, outcome: Outcome) -> tuple[Outcome, float, dict[str, float]]:
        """(outcome, score, components) of one row; a malformed verdict turns the row into an error."""
        if outcome.status == TIMEOUT:
            return outcome, self.cfg.timeout_score, {}
        if outcome.status == OK:
            verdict = outcome.value
            try:
                if not isinstance(verdict, Verdict):
                    raise TypeError(f"the verifier returned {type(verdict).__name__}, expected a Verdict")
                components = {str(name): float(value) for name, value in verdict.components.items()}
                score = float(verdict.score)
                values = {"score": score, **components}
                bad = {name: value for name, value in values.items() if not math.isfinite(value)}
                if bad:
                    raise ValueError(f"the verifier returned non-finite values {bad}")
                return outcome, score, components
            except (TypeError, ValueError) as exc:
                outcome = Outcome(ERROR, message=describe(exc))
        return outcome, self.cfg.error_score, {}

    def close(self) -> None:
        if self._pool is not None:
            self._pool.close()
            self._pool = None
