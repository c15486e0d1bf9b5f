"""``reward=format``: does the whole stripped response match a regular expression?

Reads the object field ``response_text``. Score per row: ``match_score`` when
``re.fullmatch(pattern, response_text.strip())`` succeeds, else ``mismatch_score``;
``error_score`` when the row cannot be checked (e.g. a response that is not a string).
Component ``format``: 1.0 or 0.0. With the default pattern ``\\d`` a response scores 1.0 exactly
when it is one digit (the tiny-model smoke task, paired with ``data=digits``).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import TYPE_CHECKING

from rlloom_tasks.rewards.scoring import Verdict, score_rows

if TYPE_CHECKING:  # annotations only: the plugin registers without torch
    from rlloom import Batch, RewardResult


@dataclass
class FormatRewardConfig:
    """Options of ``reward=format`` (see the module doc)."""

    pattern: str = r"\d"
    match_score: float = 1.0
    mismatch_score: float = 0.0
    error_score: float = 0.0


class FormatReward:
    """See the module doc. An invalid ``pattern`` raises ``ValueError`` when the reward is built."""

    def __init__(self, cfg: FormatRewardConfig) -> None:
        try:
            self.regex = re.compile(cfg.pattern)
        except re.error as exc:
            raise ValueError(f"reward.pattern={cfg.pattern!r} is not a valid regular expression: {exc}") from None
        self.cfg = cfg

    def verify(self, response: str) -> Verdict:
        matched = self.regex.fullmatch(response.strip()) is not None
        return Verdict(self.cfg.match_score if matched else self.cfg.mismatch_score, {"format": float(matched)})

    def __call__(self, batch: Batch) -> RewardResult:
        batch.require("response_text")
        return score_rows(
            zip(batch["response_text"]), self.verify, components=["format"], error_score=self.cfg.error_score
        )
