"""``reward=agent``: the score the agent loop gave each trajectory (an environment's summed rewards), read
from the batch's ``agent_reward`` field (:mod:`rlloom_agentkit.runner`). A trajectory the loop left
unscored (NaN) gets ``unscored_score`` and counts in ``reward/errors``; a batch without the field
(``agent=single_turn``) is a RuntimeError naming the fix."""

from __future__ import annotations

import torch

from rlloom.batch import Batch
from rlloom.types import RewardResult
from rlloom_agents.config import AgentRewardConfig


class AgentReward:
    """See the module doc."""

    def __init__(self, cfg: AgentRewardConfig) -> None:
        self.config = cfg

    def __call__(self, batch: Batch) -> RewardResult:
        if "agent_reward" not in batch:
            raise RuntimeError("reward=agent scores with the agent loop's reward: choose a loop that gives one "
                               "(agent=environment)")
        given = batch["agent_reward"].float()
        unscored = torch.isnan(given)
        scores = torch.where(unscored, torch.full_like(given, self.config.unscored_score), given)
        return RewardResult(scores=scores, num_errors=int(unscored.sum()))
