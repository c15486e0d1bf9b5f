"""rlloom-rewardkit: the one executor that reward functions score rows with (per-row verifiers, timeouts,
worker processes), and answer extraction from responses (:mod:`rlloom_rewardkit.extract`).

A reward supplies ``verify(*row) -> Verdict`` and its rows; :class:`RowScorer` runs it as an
:class:`ExecutionConfig` says (in this process or in a pool of worker processes, each row under a
wall-clock limit) and returns a :class:`~rlloom.RewardResult` in which failures are counted, never
raised.

- :mod:`rlloom_rewardkit.outcome`: :class:`Verdict` (what a verifier returns), :class:`Outcome` (what
  one call produced), :class:`SampleTimeout` (a verifier's own time budget ran out);
- :mod:`rlloom_rewardkit.pool`: :class:`WorkerPool`, the worker processes;
- :mod:`rlloom_rewardkit.runner`: :class:`ExecutionConfig` (the ``reward.num_workers`` /
  ``reward.timeout_s`` / ``reward.error_score`` / ``reward.timeout_score`` keys a reward's config
  extends), :class:`RowScorer`, and :class:`RowReward`, a reward function built on it.

Importing this package imports no torch; its names load on first use.
"""

from rlloom.lazy import lazy_exports

__all__ = ["ExecutionConfig", "Outcome", "RowReward", "RowScorer", "SampleTimeout", "Verdict", "WorkerPool"]

__getattr__ = lazy_exports(__name__, {
    "Outcome": ".outcome",
    "SampleTimeout": ".outcome",
    "Verdict": ".outcome",
    "WorkerPool": ".pool",
    "ExecutionConfig": ".runner",
    "RowReward": ".runner",
    "RowScorer": ".runner",
})
