"""rlloom-trainer: the training loop that drives the core's controller step by step, and everything a run
keeps in its folder — its lock (:mod:`.run_lock`), checkpoints and resume (:mod:`.checkpoint`, :mod:`.resume`,
:mod:`.run_state`), validation, rollout dumps, the final model — the trackers (:mod:`.trackers`), ``rlloom
train`` and the commands on what a run wrote (:mod:`.commands`: ``eval``, ``generate``, ``chat``, ``export``,
``plot``), and the test helpers of :mod:`.testing`.

Importing this package imports nothing heavier than :mod:`rlloom`.
"""


def train(overrides: list[str] | None = None) -> dict[str, float]:
    """Run ``rlloom train`` in this process and return the run's final metrics.

    ``overrides`` are the same strings the command line takes (``["preset=tiny", "algorithm=grpo"]``).
    A bad config raises :class:`rlloom.config.ConfigError` with the same message the CLI prints.
    """
    from rlloom_trainer.run import run_training

    return run_training(list(overrides or []))
