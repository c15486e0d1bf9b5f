"""PPO for rlloom (``algorithm=ppo``): a learned critic, GAE advantages, clipped policy and value
losses, and an optional (adaptive) KL penalty in the reward. The algorithm is
:class:`rlloom_algokit.ppo.PPO` (its config :class:`rlloom_algokit.ppo_config.PPOConfig`), in the
algorithm kit because Safe-RLHF extends it; this plugin registers it (:mod:`rlloom_ppo.plugin`)."""
