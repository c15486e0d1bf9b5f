"""rlloom-tasks: prompt datasets and rule-based rewards for rlloom.

Datasets (``data=<name>``): ``arithmetic``, ``reasoning_gym``, ``digits``, ``files`` (see
:mod:`rlloom_tasks.data`). Rewards (``reward=<name>``): ``arithmetic``, ``format``,
``reasoning_gym``, ``digit_fraction``, ``forbidden_digits`` (see :mod:`rlloom_tasks.rewards`). The rewards
score rows through :mod:`rlloom_rewardkit` and extract answers with :mod:`rlloom_rewardkit.extract`.
Importing this package does not import reasoning-gym (it is imported when first needed).
"""
