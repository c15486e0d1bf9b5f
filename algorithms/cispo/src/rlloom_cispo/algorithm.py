"""The ``CISPO`` algorithm: GRPO's step and advantages with CISPO's token loss."""

from __future__ import annotations

from rlloom_cispo.config import CISPOConfig
from rlloom_cispo.loss import cispo_token_loss
from rlloom_grpo.algorithm import GRPO
from rlloom_grpo.loss import make_policy_loss_fn


class CISPO(GRPO):
    """Clipped IS-weight policy optimization: group-relative advantages, token-level loss
    −sg[clip(ρ)]·A·log π (:func:`rlloom_cispo.loss.cispo_token_loss`), entropy and KL terms as GRPO's."""

    cfg: CISPOConfig

    def __init__(self, cfg: CISPOConfig) -> None:
        super().__init__(cfg)
        self.loss_fn = make_policy_loss_fn(cfg, cispo_token_loss)
