"""``algorithm=safe_rlhf`` config schema (a Hydra structured config)."""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import ClassVar, Optional

from rlloom.types import Role
from rlloom_algokit.ppo_config import PPOConfig


@dataclass
class SafeRLHFConfig(PPOConfig):
    """Safe-RLHF settings: every PPO setting (:class:`rlloom_algokit.ppo_config.PPOConfig`; the cost critic
    trains with the critic's settings), two of them with other defaults, plus the constraint's. The
    algorithm adds two roles (``extra_roles``): the cost function ``cost`` (chosen with
    ``cost=<reward function>``) and the cost critic ``cost_critic`` (a train engine serving as a critic).

    Changed defaults, as Safe-RLHF's PPO-Lag script: ``use_kl_in_reward=True`` with ``kl_coef=0.01``
    (β·KL is subtracted from the reward and added to the cost, token by token).

    The constraint E[cost] <= ``cost_limit`` (Safe-RLHF's ``threshold``), through the Lagrange
    multiplier λ = exp(log λ) (see :class:`rlloom_safe_rlhf.lagrange.LagrangeMultiplier`):

    - ``cost_limit``: d, in the cost function's units.
    - ``lambda_init``: λ at step 1 (> 0); ``lambda_lr``: the step size of log λ's gradient ascent;
      ``lambda_max``: λ's ceiling (None: none).
    - ``lambda_update_delay_steps``: λ stays at ``lambda_init`` for this many steps.
    - ``episode_cost_window``: J_c, the cost λ reacts to, is the mean cost of the last this many
      responses (this step's included).
    - ``score_clip``: token-level rewards and costs (KL terms included) are clipped to ±this before
      GAE (None: no clip; Safe-RLHF's ``clip_range_score``).
    """

    limits: ClassVar[dict] = {"cost_limit": "in (-inf, inf)", "lambda_init": "in (0, inf)", "lambda_lr": "in [0, inf)",
                              "lambda_update_delay_steps": ">= 0", "episode_cost_window": ">= 1", "score_clip": "> 0"}
    extra_roles: ClassVar[tuple[Role, ...]] = (
        Role("cost", kind="reward"),  # the config group cost=<any reward function> scores it
        Role("cost_critic", kind="train_engine", serves_as="critic"),
    )

    use_kl_in_reward: bool = True
    kl_coef: float = 0.01
    cost_limit: float = 0.0
    lambda_init: float = 1.0
    lambda_lr: float = 0.1
    lambda_max: Optional[float] = 5.0
    lambda_update_delay_steps: int = 0
    episode_cost_window: int = 128
    score_clip: Optional[float] = 50.0

    def problems(self) -> list[str]:
        problems = super().problems()
        if self.lambda_max is not None and not self.lambda_init <= self.lambda_max < math.inf:
            problems.append(f"algorithm.lambda_max={self.lambda_max}: must be >= lambda_init={self.lambda_init} "
                            "and finite (or null)")
        return problems
