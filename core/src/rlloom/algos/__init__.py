"""The math the algorithm plugins share, and the tables plugins extend with their own.

- :mod:`rlloom.algos.config`: :class:`PolicyLossConfig`, the policy-loss settings algorithm
  configs extend (torch-free);
- :mod:`rlloom.algos.lookup`: advantage estimators and policy losses by name (torch-free; their
  signatures are :class:`rlloom.protocols.AdvantageEstimator` / :class:`rlloom.protocols.PolicyLoss`);
  plugins register them with the hooks ``register_advantage_estimators`` / ``register_policy_losses``;
- :mod:`rlloom.algos.advantages`: :func:`group_relative_advantages`, :func:`compute_advantages`
  and the core's estimator ``grpo``;
- :mod:`rlloom.algos.policy_loss`: :func:`make_policy_loss_fn` and the core's policy loss
  ``vanilla``.

The loss building blocks (aggregation, PPO clip, KL estimators, whitening, returns) are in
:mod:`rlloom.losses`. Importing this package imports no torch; its names load on first use.
"""

from rlloom.lazy import lazy_exports

__all__ = [
    "PolicyLossConfig",
    "compute_advantages",
    "get_advantage_estimator",
    "get_policy_loss",
    "group_relative_advantages",
    "make_policy_loss_fn",
]

__getattr__ = lazy_exports(__name__, {
    "PolicyLossConfig": ".config",
    "get_advantage_estimator": ".lookup",
    "get_policy_loss": ".lookup",
    "compute_advantages": ".advantages",
    "group_relative_advantages": ".advantages",
    "make_policy_loss_fn": ".policy_loss",
})
