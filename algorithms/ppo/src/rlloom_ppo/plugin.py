"""Entry point ``ppo``: registers ``algorithm=ppo``."""

import rlloom
from rlloom_algokit.ppo_config import PPOConfig


@rlloom.hookimpl
def register_algorithms(register):
    register("ppo", "rlloom_algokit.ppo:PPO", config=PPOConfig)
