"""The ``GSPO`` algorithm: GRPO's step and advantages with the sequence-level clipped loss."""

from __future__ import annotations

from rlloom_gspo.config import GSPOConfig
from rlloom_gspo.loss import make_gspo_loss_fn
from rlloom_grpo.algorithm import GRPO


class GSPO(GRPO):
    """Group sequence policy optimization: importance ratio and clipping per sequence."""

    cfg: GSPOConfig

    def __init__(self, cfg: GSPOConfig) -> None:
        super().__init__(cfg)
        self.loss_fn = make_gspo_loss_fn(cfg)
