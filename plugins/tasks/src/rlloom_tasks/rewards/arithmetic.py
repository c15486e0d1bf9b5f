"""``reward=arithmetic``: is the last integer of the response the ground-truth integer?

Reads the object fields ``response_text`` and ``ground_truth`` (an int, or a string holding
one). Score per row: ``correct_score`` if :func:`~rlloom_rewardkit.extract.last_integer` of the
response equals ``int(ground_truth)``, else ``incorrect_score`` (also when the response holds no
number); ``error_score`` when the row cannot be checked (e.g. a ground truth that is not an
integer). Component ``correct``: 1.0 or 0.0. ``num_workers`` / ``timeout_s`` / ``timeout_score``: as
for every row-scored reward (:mod:`rlloom_rewardkit.runner`).
"""

from __future__ import annotations

import functools
from dataclasses import dataclass

from rlloom_rewardkit import ExecutionConfig, RowReward, Verdict
from rlloom_rewardkit.extract import last_integer


@dataclass
class ArithmeticRewardConfig(ExecutionConfig):
    """Options of ``reward=arithmetic`` (see the module doc)."""

    correct_score: float = 1.0  # the response's last integer equals the answer
    incorrect_score: float = 0.0  # otherwise (also when it has no integer)


def verify(cfg: ArithmeticRewardConfig, response: str, ground_truth: int | str) -> Verdict:
    """One row's verdict (see the module doc)."""
    expected = int(ground_truth)
    correct = last_integer(response) == expected
    return Verdict(cfg.correct_score if correct else cfg.incorrect_score, {"correct": float(correct)})


class ArithmeticReward(RowReward):
    """See the module doc."""

    def __init__(self, cfg: ArithmeticRewardConfig) -> None:
        super().__init__(functools.partial(verify, cfg), cfg, ("response_text", "ground_truth"), components=["correct"])
