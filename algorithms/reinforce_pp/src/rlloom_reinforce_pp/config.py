"""``algorithm=reinforce_pp`` / ``algorithm=reinforce_pp_baseline`` config schema."""

from dataclasses import dataclass
from typing import ClassVar

from rlloom.choices import KL_ESTIMATORS
from rlloom_grpo.config import GRPOStepConfig


@dataclass
class ReinforcePPConfig(GRPOStepConfig):
    """The fields of GRPO's step (see :class:`rlloom_grpo.config.GRPOStepConfig`) plus:

    - ``gamma``: discount of the token-level return (``reinforce_pp`` only).
    - ``use_kl_in_reward`` / ``kl_coef`` / ``kl_penalty``: subtract β·KL_t (estimator
      ``kl_penalty``, see :data:`rlloom.choices.KL_ESTIMATORS`) from every response token's reward;
      needs a reference model.
    """

    algorithm_name: ClassVar[str] = "reinforce_pp"

    gamma: float = 1.0
    use_kl_in_reward: bool = False
    kl_coef: float = 0.001
    kl_penalty: str = "k1"

    def problems(self) -> list[str]:
        problems = super().problems()
        if not 0.0 <= self.gamma <= 1.0:
            problems.append(f"gamma must be in [0, 1], got {self.gamma}")
        if self.kl_coef < 0:
            problems.append(f"kl_coef must be >= 0, got {self.kl_coef}")
        if self.kl_penalty not in KL_ESTIMATORS:
            problems.append(f"kl_penalty must be one of {sorted(KL_ESTIMATORS)}, got {self.kl_penalty!r}")
        return problems
