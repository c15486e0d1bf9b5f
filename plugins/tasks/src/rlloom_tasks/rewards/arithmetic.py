"""``reward=arithmetic``: is the last integer of the response the ground-truth integer?

Reads the object fields ``response_text`` and ``ground_truth`` (an int, or a string holding
one). Score per row: ``correct_score`` if :func:`~rlloom_tasks.extract.last_integer` of the
response equals ``int(ground_truth)``, else ``incorrect_score`` (also when the response holds no
number); ``error_score`` when the row cannot be checked (e.g. a ground truth that is not an
integer). Component ``correct``: 1.0 or 0.0.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from rlloom_tasks.extract import last_integer
from rlloom_tasks.rewards.scoring import Verdict, score_rows

if TYPE_CHECKING:  # annotations only: the plugin registers without torch
    from rlloom import Batch, RewardResult


@dataclass
class ArithmeticRewardConfig:
    """Options of ``reward=arithmetic`` (see the module doc)."""

    correct_score: float = 1.0
    incorrect_score: float = 0.0
    error_score: float = 0.0


class ArithmeticReward:
    """See the module doc."""

    def __init__(self, cfg: ArithmeticRewardConfig) -> None:
        self.cfg = cfg

    def verify(self, response: str, ground_truth: int | str) -> Verdict:
        expected = int(ground_truth)
        correct = last_integer(response) == expected
        return Verdict(
            self.cfg.correct_score if correct else self.cfg.incorrect_score,
            {"correct": float(correct)},
        )

    def __call__(self, batch: Batch) -> RewardResult:
        batch.require("response_text", "ground_truth")
        return score_rows(
            zip(batch["response_text"], batch["ground_truth"], strict=True),
            self.verify,
            components=["correct"],
            error_score=self.cfg.error_score,
        )
