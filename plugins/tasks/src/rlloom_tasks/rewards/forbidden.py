"""``reward=forbidden_digits``: 1.0 when the response contains a forbidden digit, else 0.0.

A synthetic *cost* for ``algorithm=safe_rlhf`` on ``data=digits`` (``cost=forbidden_digits``):
``reward=digit_fraction`` pays for digits, this cost counts the responses that use any character of
``digits`` (default ``"01234"``), so a constrained policy learns to answer with the other digits.
Score per row: ``1.0`` if any character of the response is in ``digits``, else ``0.0``;
``error_score`` when the row cannot be checked. Component ``forbidden``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from rlloom_tasks.rewards.scoring import Verdict, score_rows

if TYPE_CHECKING:  # annotations only: the plugin registers without torch
    from rlloom import Batch, RewardResult


@dataclass
class ForbiddenDigitsRewardConfig:
    """Options of ``reward=forbidden_digits`` (see the module doc)."""

    digits: str = "01234"
    error_score: float = 0.0

    def __post_init__(self) -> None:
        if not self.digits or not all(c.isdigit() for c in self.digits):
            raise ValueError(f"digits must be a non-empty string of digits such as '01234', got {self.digits!r}")


class ForbiddenDigitsReward:
    """See the module doc."""

    def __init__(self, cfg: ForbiddenDigitsRewardConfig) -> None:
        self.cfg = cfg
        self.forbidden = frozenset(cfg.digits)

    def verify(self, response: str) -> Verdict:
        if not isinstance(response, str):
            raise TypeError(f"response_text must be a string, got {type(response).__name__}")
        found = float(any(c in self.forbidden for c in response))
        return Verdict(found, {"forbidden": found})

    def __call__(self, batch: Batch) -> RewardResult:
        batch.require("response_text")
        return score_rows(
            zip(batch["response_text"]), self.verify, components=["forbidden"], error_score=self.cfg.error_score
        )
