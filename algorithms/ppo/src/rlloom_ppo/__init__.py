"""PPO for rlloom: a learned critic, GAE advantages, clipped policy and value losses, and an
optional (adaptive) KL penalty in the reward (``algorithm=ppo``)."""

from rlloom.lazy import lazy_exports

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

__getattr__ = lazy_exports(__name__, {  # imported on first use: the plugin registers without torch
    "PPO": ".algorithm",
    "PPOConfig": ".config",
    "gae_advantages": ".gae",
    "AdaptiveKLController": ".kl_control",
    "FixedKLController": ".kl_control",
    "clipped_value_loss": ".value_loss",
    "explained_variance": ".value_loss",
    "make_value_loss_fn": ".value_loss",
})
