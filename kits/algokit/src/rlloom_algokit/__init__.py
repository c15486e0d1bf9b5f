"""rlloom-algokit: the algorithm math the algorithm plugins share, so that none imports another.

- :mod:`rlloom_algokit.losses`: loss building blocks over tensors (aggregation, PPO clip, KL
  estimators, whitening, returns); :mod:`rlloom_algokit.choices`: their valid names (torch-free);
- :mod:`rlloom_algokit.config`: :class:`PolicyLossConfig`, the policy-loss settings algorithm
  configs extend, and :class:`MiniBatchSchedule` (torch-free);
- :mod:`rlloom_algokit.lookup`: advantage estimators and policy losses by name (torch-free; their
  signatures are :class:`rlloom.protocols.AdvantageEstimator` / :class:`rlloom.protocols.PolicyLoss`);
  plugins register them with the hooks ``register_advantage_estimators`` / ``register_policy_losses``;
- :mod:`rlloom_algokit.advantages`: :func:`group_relative_advantages`, :func:`compute_advantages`
  and the estimator ``grpo``; :mod:`rlloom_algokit.policy_loss`: :func:`make_policy_loss_fn` and the
  policy loss ``vanilla`` (both registered by :mod:`rlloom_algokit.plugin`);
- GRPO's step (:mod:`rlloom_algokit.grpo`, :mod:`rlloom_algokit.grpo_config`), which rlloom-grpo
  registers and rlloom-dapo extends; PPO's (:mod:`rlloom_algokit.ppo`, :mod:`rlloom_algokit.ppo_config`,
  :mod:`rlloom_algokit.gae`, :mod:`rlloom_algokit.value_loss`, :mod:`rlloom_algokit.kl_control`),
  which rlloom-ppo registers and rlloom-safe-rlhf extends.

Importing this package imports no torch; its names load on first use.
"""

from rlloom.lazy import lazy_exports

__all__ = [
    "GRPO",
    "PPO",
    "AdaptiveKLController",
    "FixedKLController",
    "GRPOConfig",
    "GRPOStepConfig",
    "MiniBatchSchedule",
    "PPOConfig",
    "PolicyLossConfig",
    "clipped_value_loss",
    "compute_advantages",
    "explained_variance",
    "gae_advantages",
    "get_advantage_estimator",
    "get_policy_loss",
    "group_relative_advantages",
    "make_policy_loss_fn",
    "make_value_loss_fn",
]

__getattr__ = lazy_exports(__name__, {
    "MiniBatchSchedule": ".config",
    "PolicyLossConfig": ".config",
    "get_advantage_estimator": ".lookup",
    "get_policy_loss": ".lookup",
    "compute_advantages": ".advantages",
    "group_relative_advantages": ".advantages",
    "make_policy_loss_fn": ".policy_loss",
    "GRPO": ".grpo",
    "GRPOConfig": ".grpo_config",
    "GRPOStepConfig": ".grpo_config",
    "PPO": ".ppo",
    "PPOConfig": ".ppo_config",
    "gae_advantages": ".gae",
    "AdaptiveKLController": ".kl_control",
    "FixedKLController": ".kl_control",
    "clipped_value_loss": ".value_loss",
    "explained_variance": ".value_loss",
    "make_value_loss_fn": ".value_loss",
})
