"""``reward=python``: a user's own Python function scores each response.

``reward.function`` names it as ``"package.module:function"`` (an importable module) or
``"/path/to/file.py:function"`` (a file, loaded as a module of its own; a relative path is taken
from the current directory). The function is called once per response::

    def my_reward(response_text: str, ground_truth: Any, extra: dict) -> float | dict:
        ...

- ``response_text``: the decoded response; ``ground_truth`` and ``extra``: the prompt's
  ``PromptRecord.ground_truth`` and ``PromptRecord.extra`` (``{}`` when the batch has no ``extra``).
- Return a number (the score; ``bool`` counts as 0/1), or a dict with a ``"score"`` key whose other
  keys are named components, each logged as ``reward/<name>/mean``.

A call that raises, or returns anything else, is an error: scored ``reward.error_score`` and counted
in ``reward/errors``; ``reward.timeout_s`` and ``reward.num_workers`` work as for every row-scored
reward (:mod:`rlloom_rewardkit.runner`). With ``num_workers >= 1`` the function is loaded again
in every worker process, so it must not rely on state set up by the trainer's process.
"""

from __future__ import annotations

from dataclasses import dataclass

from rlloom_rewardkit import ExecutionConfig, RowReward

from rlloom_rewards.user_function import UserFunction, load_function


@dataclass
class PythonRewardConfig(ExecutionConfig):
    """Options of ``reward=python`` (see the module doc)."""

    function: str = ""  # "package.module:function" or "/path/to/file.py:function"


class PythonReward(RowReward):
    """See the module doc. The function is loaded when the reward is built, so a wrong
    ``reward.function`` fails before training starts."""

    def __init__(self, cfg: PythonRewardConfig) -> None:
        load_function(cfg.function)
        super().__init__(UserFunction(cfg.function), cfg, ("response_text", "ground_truth", "extra"),
                         defaults={"extra": {}})
