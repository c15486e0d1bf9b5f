"""Reward execution: score rows in-process or in a process pool, with a per-sample timeout.

A reward supplies ``verify(*row) -> Verdict`` (:class:`~rlloom_rewardkit.outcome.Verdict`: a score and
named components) and a list of rows; :class:`RowScorer` turns them into a
:class:`~rlloom.RewardResult` (:class:`RowReward` is a reward function that takes the rows from a
batch's fields and scores them so):

- ``num_workers == 0``: rows run one after another in this process. With ``timeout_s > 0`` each
  call is interrupted by ``SIGALRM`` after ``timeout_s`` seconds (Python code only: a call stuck
  inside a C extension is interrupted when it returns to Python); this needs the main thread.
- ``num_workers >= 1``: rows run in a :class:`~rlloom_rewardkit.pool.WorkerPool`; a call still
  running after ``timeout_s`` seconds has its worker killed. ``verify`` must then be picklable by
  reference (see that module).

A row whose ``verify`` raises, returns something that is not a :class:`Verdict`, lacks one of the
scorer's declared ``components``, or whose score or components are not finite numbers is an
**error**: scored ``error_score`` and counted in ``num_errors``. A row that runs out of time (or
whose verifier raises :class:`~rlloom_rewardkit.outcome.SampleTimeout`) is a **timeout**: scored
``timeout_score`` and counted in ``num_timeouts``. Nothing propagates.

Components are the declared names and every name a scored verdict carries, in sorted order; a row that lacks
a name (an error, a timeout, or a verdict that does not carry it) gets 0.0 there. ``info`` holds
per row ``status`` (``"ok"``, ``"error"``, ``"timeout"``) and ``error`` (the message, ``""`` when
ok). The first row of each distinct error message is also printed to stderr, for up to
:data:`PRINTED_ERRORS` messages per process (:func:`print_new_errors`): a reward that fails on every row
says why on the console, not only as a count. Scores do not depend on ``num_workers`` (for verifiers
that do not themselves depend on the process they run in).
"""

from __future__ import annotations

import contextlib
import math
import signal
import sys
import threading
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from rlloom_rewardkit.outcome import ERROR, OK, TIMEOUT, Outcome, Verdict, call, describe
from rlloom_rewardkit.pool import WorkerPool

if TYPE_CHECKING:  # annotations only: reward plugins import this module while registering, without torch
    from rlloom import Batch, RewardResult


@dataclass
class ExecutionConfig:
    """How a reward runs its verifier: the keys every row-scored reward's config extends."""

    num_workers: int = 0  # 0: in this process; n: a pool of n worker processes
    timeout_s: float = 0.0  # per-sample wall-clock limit; 0: none
    error_score: float = 0.0  # score of a row whose verifier raised
    timeout_score: float = 0.0  # score of a row that ran out of time

    def __post_init__(self) -> None:
        if self.num_workers < 0:
            raise ValueError(f"reward.num_workers must be >= 0 (0: in-process), got {self.num_workers}")
        if self.timeout_s < 0 or math.isnan(self.timeout_s):
            raise ValueError(f"reward.timeout_s must be >= 0 (0: no limit), got {self.timeout_s}")


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
    """:func:`~rlloom_rewardkit.outcome.call` of ``fn(*args)`` in this process, interrupted after
    ``timeout_s`` seconds."""
    try:
        with _alarm(timeout_s):
            return call(fn, args)
    except _Expired:
        return Outcome(TIMEOUT, message=f"no result within timeout_s={timeout_s}")


PRINTED_ERRORS = 3
"""Distinct error messages a process prints (each once); later new ones are only counted."""
_printed: set[str] = set()


def print_new_errors(messages: Sequence[str], error_score: float) -> None:
    """Print each of ``messages`` (rows scored as errors) not printed before in this process, up to
    :data:`PRINTED_ERRORS` in all, as one stderr line each."""
    for message in dict.fromkeys(messages):
        if message in _printed or len(_printed) >= PRINTED_ERRORS:
            continue
        _printed.add(message)
        last = " (later new errors are counted, not printed)" if len(_printed) == PRINTED_ERRORS else ""
        print(f"reward: a row scored {error_score:g} as an error, counted in reward/errors: {message}{last}",
              file=sys.stderr, flush=True)


class RowScorer:
    """Runs a verifier over rows as :class:`ExecutionConfig` says; see the module doc.

    ``components``: names every verdict must carry; they are in every result, even when no row scored.
    """

    def __init__(self, cfg: ExecutionConfig, components: Sequence[str] = ()) -> None:
        self.config = cfg
        self.components = tuple(components)
        self._pool: WorkerPool | None = None

    def outcomes(self, verify: Callable[..., Verdict], rows: Sequence[tuple]) -> list[Outcome]:
        """The raw outcome of ``verify(*row)`` for every row, in order."""
        if self.config.num_workers == 0:
            if self.config.timeout_s > 0 and threading.current_thread() is not threading.main_thread():
                raise RuntimeError(
                    "reward.timeout_s needs the main thread when reward.num_workers=0 (it uses SIGALRM); "
                    "set reward.num_workers >= 1 to score in worker processes"
                )
            return [call_with_timeout(verify, tuple(row), self.config.timeout_s) for row in rows]
        if self._pool is None:
            self._pool = WorkerPool(self.config.num_workers)
        return self._pool.map(verify, rows, self.config.timeout_s)

    def score(self, verify: Callable[..., Verdict], rows: Sequence[tuple]) -> RewardResult:
        return self.result(self.outcomes(verify, rows))

    def result(self, outcomes: Sequence[Outcome]) -> RewardResult:
        """The :class:`~rlloom.RewardResult` of per-row outcomes whose values are verdicts."""
        import torch
        from rlloom import RewardResult

        rows = [self._checked(outcome) for outcome in outcomes]
        errors = [outcome.message for outcome, _, _ in rows if outcome.status == ERROR]
        print_new_errors(errors, self.config.error_score)
        found = {name for outcome, _, components in rows if outcome.status == OK for name in components}
        names = sorted(found.union(self.components))
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
            return outcome, self.config.timeout_score, {}
        if outcome.status == OK:
            verdict = outcome.value
            try:
                if not isinstance(verdict, Verdict):
                    raise TypeError(f"the verifier returned {type(verdict).__name__}, expected a Verdict")
                components = {str(name): float(value) for name, value in verdict.components.items()}
                missing = [name for name in self.components if name not in components]
                if missing:
                    raise ValueError(f"the verdict lacks the components {missing}")
                score = float(verdict.score)
                values = {"score": score, **components}
                bad = {name: value for name, value in values.items() if not math.isfinite(value)}
                if bad:
                    raise ValueError(f"the verifier returned non-finite values {bad}")
                return outcome, score, components
            except (TypeError, ValueError) as exc:
                outcome = Outcome(ERROR, message=describe(exc))
        return outcome, self.config.error_score, {}

    def close(self) -> None:
        if self._pool is not None:
            self._pool.close()
            self._pool = None


class RowReward:
    """A reward function that scores every row of a batch with ``verify`` through a :class:`RowScorer`.

    A row is the batch's object fields ``columns``, in ``verify``'s argument order; a field named in
    ``defaults`` that the batch lacks takes that value on every row, any other missing field raises
    :class:`~rlloom.BatchError` naming it. ``components`` are the scorer's declared components.
    :meth:`close` stops the scorer's worker processes.
    """

    def __init__(
        self,
        verify: Callable[..., Verdict],
        cfg: ExecutionConfig,
        columns: Sequence[str],
        *,
        components: Sequence[str] = (),
        defaults: Mapping[str, Any] | None = None,
    ) -> None:
        self.verify = verify
        self.columns = tuple(columns)
        self.defaults = dict(defaults or {})
        self.scorer = RowScorer(cfg, components)

    def rows(self, batch: Batch) -> list[tuple]:
        """The row tuples of ``batch`` (see the class doc)."""
        batch.require(*(name for name in self.columns if name not in self.defaults))
        values = [batch[name] if name in batch else [self.defaults[name]] * len(batch) for name in self.columns]
        return list(zip(*values, strict=True))

    def __call__(self, batch: Batch) -> RewardResult:
        return self.scorer.score(self.verify, self.rows(batch))

    def close(self) -> None:
        self.scorer.close()
