"""The ``RLOO`` algorithm: GRPO's step with the leave-one-out advantage."""

from __future__ import annotations

from rlloom_grpo.algorithm import GRPO
from rlloom_rloo.config import RLOOConfig


class RLOO(GRPO):
    """REINFORCE leave-one-out: n samples per prompt, each baselined by the mean of the other n−1
    (the estimator ``rloo``: :func:`rlloom_rloo.advantages.rloo_advantages` of ``scores`` grouped
    by ``uid``)."""

    cfg: RLOOConfig
    adv_estimator = "rloo"
