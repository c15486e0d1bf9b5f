"""``algorithm=remax`` config schema (a Hydra structured config)."""

from dataclasses import dataclass
from typing import ClassVar

from rlloom_grpo.config import GRPOConfig


@dataclass
class ReMaxConfig(GRPOConfig):
    """ReMax takes GRPO's fields (see :class:`rlloom_grpo.config.GRPOConfig`): ``n`` sampled
    responses per prompt (plus one greedy response per prompt for the baseline), the clipped policy
    loss, optional KL loss. ``norm_adv_by_std``, ``adv_estimator`` and ``epsilon`` are not used."""

    algorithm_name: ClassVar[str] = "remax"
