"""``agent=single_turn`` as an :class:`~rlloom.protocols.AgentLoop`: what a dataset row naming
``single_turn`` gets inside a run whose agent is another loop (a run with ``agent=single_turn`` uses
the rollout engine's batch call, which gives the same tokens)."""

from __future__ import annotations

from typing import Any

from rlloom.protocols import Episode


class SingleTurn:
    """One assistant turn; the episode ends with ``answer`` (a stop token ended it) or ``length``."""

    tools: tuple = ()

    def __init__(self, cfg: Any = None, registry: Any = None) -> None:
        self.config = cfg

    async def run(self, episode: Episode) -> None:
        turn = await episode.assistant_turn()
        if turn is not None:
            episode.finish("answer" if turn.finish_reason == "stop" else "length")
