"""``reward=digit_fraction``: the share of the response's characters that are digits.

Score per row: (number of characters c with ``c.isdigit()``) / (number of characters), 0.0 for an
empty response; ``error_score`` when the row cannot be checked. A dense reward that a random-init
model (``model=tiny``, ``data=digits``) learns within a minute: the ``preset=tiny`` smoke task.
Component ``digit_fraction``. ``num_workers`` / ``timeout_s`` / ``timeout_score``: as for every
row-scored reward (:mod:`rlloom_rewardkit.runner`).
"""

from __future__ import annotations

from dataclasses import dataclass

from rlloom_rewardkit import ExecutionConfig, RowReward, Verdict


@dataclass
class DigitFractionRewardConfig(ExecutionConfig):
    """Options of ``reward=digit_fraction`` (see the module doc)."""


def verify(response: str) -> Verdict:
    """One row's verdict (see the module doc)."""
    if not isinstance(response, str):
        raise TypeError(f"response_text must be a string, got {type(response).__name__}")
    share = sum(c.isdigit() for c in response) / len(response) if response else 0.0
    return Verdict(share, {"digit_fraction": share})


class DigitFractionReward(RowReward):
    """See the module doc."""

    def __init__(self, cfg: DigitFractionRewardConfig) -> None:
        super().__init__(verify, cfg, ("response_text",), components=["digit_fraction"])
