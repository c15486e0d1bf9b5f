"""``reward=digit_fraction``: the share of the response's characters that are digits.

Score per row: (number of characters c with ``c.isdigit()``) / (number of characters), 0.0 for an
empty response; ``error_score`` when the row cannot be checked. A dense reward that a random-init
model (``model=tiny``, ``data=digits``) learns within a minute: the ``preset=tiny`` smoke task.
Component ``digit_fraction``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from rlloom_tasks.rewards.scoring import Verdict, score_rows

if TYPE_CHECKING:  # annotations only: the plugin registers without torch
    from rlloom import Batch, RewardResult


@dataclass
class DigitFractionRewardConfig:
    """Options of ``reward=digit_fraction`` (see the module doc)."""

    error_score: float = 0.0


class DigitFractionReward:
    """See the module doc."""

    def __init__(self, cfg: DigitFractionRewardConfig) -> None:
        self.cfg = cfg

    @staticmethod
    def verify(response: str) -> Verdict:
        if not isinstance(response, str):
            raise TypeError(f"response_text must be a string, got {type(response).__name__}")
        share = sum(c.isdigit() for c in response) / len(response) if response else 0.0
        return Verdict(share, {"digit_fraction": share})

    def __call__(self, batch: Batch) -> RewardResult:
        batch.require("response_text")
        return score_rows(
            zip(batch["response_text"]), self.verify, components=["digit_fraction"], error_score=self.cfg.error_score
        )
