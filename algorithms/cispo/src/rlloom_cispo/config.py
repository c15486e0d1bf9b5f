"""``algorithm=cispo`` config schema (a Hydra structured config)."""

from dataclasses import dataclass
from typing import ClassVar, Optional

from rlloom_grpo.config import GRPOConfig


@dataclass
class CISPOConfig(GRPOConfig):
    """GRPO's fields (see :class:`rlloom_grpo.config.GRPOConfig`: group size, advantages, KL,
    entropy, mini-batches) with CISPO's meaning of the clip range: ``clip_ratio_low`` /
    ``clip_ratio_high`` bound the importance-sampling *weight* to [1 − low, 1 + high], not the
    surrogate (the policy loss ``cispo``: :func:`rlloom_cispo.loss.cispo_token_loss`).

    Defaults: ``clip_ratio_low=1.0`` (no lower bound: the weight only has to stay ≥ 0; the paper
    sets ε_low large for the same reason), ``clip_ratio_high=4.0`` (our choice; the paper tunes
    ε_high, so set it for your run), ``token-mean`` aggregation (the paper's token-level
    objective), no dual clip (it belongs to the PPO surrogate).
    """

    algorithm_name: ClassVar[str] = "cispo"

    clip_ratio_low: float = 1.0
    clip_ratio_high: float = 4.0
    clip_ratio_c: Optional[float] = None
    policy_loss: str = "cispo"
