"""The calls a rollout role outside the trainer's process answers for ``trainer.stream_groups`` and
``trainer.partial_rollout`` (docs/async.md),
whether it lives in the rollout process (``launcher=local``) or on a Ray pool (``launcher=ray``); imports no torch
(the launchers' modules load with the plugins).

- ``generate_stream(prompts, sampling)``: the job's groups (one prompt's ``n`` responses each) handed back one by
  one as they finish (:func:`rlloom_enginekit.stream.generate_groups`), through the handle's
  ``streamed(wait)``; the call itself answers only with its error, when it fails.
- ``stream_groups()``: checks that the engine can (:func:`check_streams`).
- ``partial_rollouts(version)``: turns partial rollouts on, the weights the engine holds being ``version``
  (:func:`rlloom_enginekit.partial.check_interruptible` first).
"""

from __future__ import annotations

GENERATE_STREAM = "generate_stream"
STREAM_GROUPS = "stream_groups"
PARTIAL_ROLLOUTS = "partial_rollouts"


def check_streams(engine: object) -> None:
    """TypeError naming ``trainer.stream_groups`` unless ``engine`` is a
    :class:`~rlloom_enginekit.stream.StreamsRows`."""
    from rlloom_enginekit.stream import StreamsRows

    if not isinstance(engine, StreamsRows):
        raise TypeError(f"trainer.stream_groups=true: the rollout engine {type(engine).__name__} cannot hand on "
                        "rows as they finish; set it false")
