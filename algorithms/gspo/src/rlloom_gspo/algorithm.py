"""The ``GSPO`` algorithm: GRPO's step and advantages with the sequence-level clipped loss."""

from __future__ import annotations

from rlloom_grpo.algorithm import GRPO
from rlloom_gspo.config import GSPOConfig


class GSPO(GRPO):
    """Group sequence policy optimization: importance ratio and clipping per sequence (the policy
    loss ``gspo``, :func:`rlloom_gspo.loss.gspo_policy_loss`, ``GSPOConfig``'s default)."""

    cfg: GSPOConfig
