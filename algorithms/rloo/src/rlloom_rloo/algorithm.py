"""The ``RLOO`` algorithm: GRPO's step with the leave-one-out advantage."""

from __future__ import annotations

import torch

from rlloom.batch import Batch
from rlloom_grpo.algorithm import GRPO
from rlloom_rloo.advantages import rloo_advantages
from rlloom_rloo.config import RLOOConfig


class RLOO(GRPO):
    """REINFORCE leave-one-out: n samples per prompt, each baselined by the mean of the other n−1."""

    cfg: RLOOConfig

    def compute_advantages(self, batch: Batch) -> torch.Tensor:
        """:func:`rlloom_rloo.advantages.rloo_advantages` of ``scores`` grouped by ``uid``."""
        batch.require("scores", "uid", "response_mask")
        return rloo_advantages(batch["scores"], batch["uid"], batch["response_mask"])
