"""Entry point ``ppo``: registers ``algorithm=ppo``."""

import rlloom
from rlloom_ppo.config import PPOConfig


@rlloom.hookimpl
def register_algorithms(register):
    register("ppo", "rlloom_ppo.algorithm:PPO", config=PPOConfig)
