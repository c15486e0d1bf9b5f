"""rlloom-rewards: reward functions for rlloom and the machinery that runs them.

Rewards (``reward=<name>``): ``math`` (:mod:`rlloom_rewards.math_answer`), ``code``
(:mod:`rlloom_rewards.code.reward`, sandboxed by :mod:`rlloom_rewards.code.sandbox`), ``python``
(:mod:`rlloom_rewards.python_fn`), ``combined`` (:mod:`rlloom_rewards.combined`), ``model``
(:mod:`rlloom_rewards.model`). Dataset: ``data=humaneval`` (:mod:`rlloom_rewards.code.humaneval`).
Rule-based rewards run their verifier through the reward kit, :mod:`rlloom_rewardkit` (in-process or a
process pool, per-sample timeouts, errors and timeouts counted).
"""
