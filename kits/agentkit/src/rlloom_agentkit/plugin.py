"""Entry point ``agentkit``: registers ``agent=single_turn``, the default agent loop (one sampled answer
per prompt; the trainer then generates with the rollout engine's batch call, as before agents existed)."""

import rlloom
from rlloom_agentkit.config import SingleTurnConfig


@rlloom.hookimpl
def register_agent_loops(register):
    register("single_turn", "rlloom_agentkit.loops:SingleTurn", config=SingleTurnConfig)
