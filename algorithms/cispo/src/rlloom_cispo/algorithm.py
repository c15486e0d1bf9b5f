"""The ``CISPO`` algorithm: GRPO's step and advantages with CISPO's token loss."""

from __future__ import annotations

from rlloom_cispo.config import CISPOConfig
from rlloom_grpo.algorithm import GRPO


class CISPO(GRPO):
    """Clipped IS-weight policy optimization: group-relative advantages, token-level loss
    −sg[clip(ρ)]·A·log π (the policy loss ``cispo``, :func:`rlloom_cispo.loss.cispo_token_loss`,
    ``CISPOConfig``'s default), entropy and KL terms as GRPO's."""

    cfg: CISPOConfig
