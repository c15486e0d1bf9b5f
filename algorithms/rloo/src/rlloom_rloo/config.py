"""``algorithm=rloo`` config schema (a Hydra structured config)."""

from dataclasses import dataclass
from typing import ClassVar

from rlloom_grpo.config import GRPOConfig


@dataclass
class RLOOConfig(GRPOConfig):
    """RLOO takes GRPO's fields (see :class:`rlloom_grpo.config.GRPOConfig`): ``n`` responses per
    prompt, the clipped policy loss, optional KL loss. ``norm_adv_by_std``, ``adv_estimator`` and
    ``epsilon`` are not used: the leave-one-out baseline replaces them."""

    algorithm_name: ClassVar[str] = "rloo"
