"""``algorithm=remax`` config schema (a Hydra structured config)."""

from dataclasses import dataclass
from typing import ClassVar

from rlloom_grpo.config import GRPOStepConfig


@dataclass
class ReMaxConfig(GRPOStepConfig):
    """ReMax takes the fields of GRPO's step (see :class:`rlloom_grpo.config.GRPOStepConfig`): ``n``
    sampled responses per prompt (plus one greedy response per prompt for the baseline), the
    clipped policy loss, optional KL loss, mini-batches. It has no advantage settings."""

    algorithm_name: ClassVar[str] = "remax"
