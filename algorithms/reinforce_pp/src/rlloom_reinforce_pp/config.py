"""``algorithm=reinforce_pp`` / ``algorithm=reinforce_pp_baseline`` config schema."""

from dataclasses import dataclass
from typing import ClassVar

from rlloom.choices import KL_ESTIMATORS
from rlloom_grpo.config import GRPOConfig


@dataclass
class ReinforcePPConfig(GRPOConfig):
    """GRPO's fields (see :class:`rlloom_grpo.config.GRPOConfig`; ``norm_adv_by_std``,
    ``adv_estimator`` and ``epsilon`` are not used) plus:

    - ``gamma``: discount of the token-level return (``reinforce_pp`` only).
    - ``use_kl_in_reward`` / ``kl_coef`` / ``kl_penalty``: subtract β·KL_t (estimator
      ``kl_penalty``, see :data:`rlloom.losses.KL_ESTIMATORS`) from every response token's reward;
      needs a reference model.
    """

    algorithm_name: ClassVar[str] = "reinforce_pp"

    gamma: float = 1.0
    use_kl_in_reward: bool = False
    kl_coef: float = 0.001
    kl_penalty: str = "k1"

    def __post_init__(self) -> None:
        super().__post_init__()
        problems = []
        if not 0.0 <= self.gamma <= 1.0:
            problems.append(f"gamma must be in [0, 1], got {self.gamma}")
        if self.kl_coef < 0:
            problems.append(f"kl_coef must be >= 0, got {self.kl_coef}")
        if self.kl_penalty not in KL_ESTIMATORS:
            problems.append(f"kl_penalty must be one of {sorted(KL_ESTIMATORS)}, got {self.kl_penalty!r}")
        if problems:
            raise ValueError("invalid algorithm=reinforce_pp config: " + "; ".join(problems))
