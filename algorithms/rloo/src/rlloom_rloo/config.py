"""``algorithm=rloo`` config schema (a Hydra structured config)."""

from dataclasses import dataclass
from typing import ClassVar

from rlloom_grpo.config import GRPOStepConfig


@dataclass
class RLOOConfig(GRPOStepConfig):
    """RLOO takes the fields of GRPO's step (see :class:`rlloom_grpo.config.GRPOStepConfig`): ``n``
    responses per prompt, the clipped policy loss, optional KL loss, mini-batches. It has no
    advantage settings: the leave-one-out baseline needs none."""

    algorithm_name: ClassVar[str] = "rloo"
