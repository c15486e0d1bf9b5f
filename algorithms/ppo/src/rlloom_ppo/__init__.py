"""PPO for rlloom: a learned critic, GAE advantages, clipped policy and value losses, and an
optional (adaptive) KL penalty in the reward (``algorithm=ppo``)."""

from rlloom_ppo.algorithm import PPO
from rlloom_ppo.config import PPOConfig
from rlloom_ppo.gae import gae_advantages
from rlloom_ppo.kl_control import AdaptiveKLController, FixedKLController
from rlloom_ppo.value_loss import clipped_value_loss, explained_variance, make_value_loss_fn

__all__ = [
    "PPO",
    "AdaptiveKLController",
    "FixedKLController",
    "PPOConfig",
    "clipped_value_loss",
    "explained_variance",
    "gae_advantages",
    "make_value_loss_fn",
]
