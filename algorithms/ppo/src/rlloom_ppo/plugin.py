"""Entry point ``ppo``: registers ``algorithm=ppo``."""

import rlloom
from rlloom_ppo.algorithm import PPO
from rlloom_ppo.config import PPOConfig


@rlloom.hookimpl
def register_algorithms(register):
    register("ppo", PPO, config=PPOConfig)
