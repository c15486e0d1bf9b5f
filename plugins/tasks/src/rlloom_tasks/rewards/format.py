"""``reward=format``: does the whole stripped response match a regular expression?

Reads the object field ``response_text``. Score per row: ``match_score`` when
``re.fullmatch(pattern, response_text.strip())`` succeeds, else ``mismatch_score``;
``error_score`` when the row cannot be checked (e.g. a response that is not a string).
Component ``format``: 1.0 or 0.0. With the default pattern ``\\d`` a response scores 1.0 exactly
when it is one digit (the tiny-model smoke task, paired with ``data=digits``). ``num_workers`` /
``timeout_s`` / ``timeout_score``: as for every row-scored reward (:mod:`rlloom_rewardkit.runner`).
"""

from __future__ import annotations

import functools
import re
from dataclasses import dataclass

from rlloom_rewardkit import ExecutionConfig, RowReward, Verdict


@dataclass
class FormatRewardConfig(ExecutionConfig):
    """Options of ``reward=format`` (see the module doc)."""

    pattern: str = r"\d"  # re.fullmatch against the stripped response
    match_score: float = 1.0  # the pattern matches
    mismatch_score: float = 0.0  # it does not


def verify(cfg: FormatRewardConfig, response: str) -> Verdict:
    """One row's verdict (see the module doc)."""
    matched = re.fullmatch(cfg.pattern, response.strip()) is not None
    return Verdict(cfg.match_score if matched else cfg.mismatch_score, {"format": float(matched)})


class FormatReward(RowReward):
    """See the module doc. An invalid ``pattern`` raises ``ValueError`` when the reward is built."""

    def __init__(self, cfg: FormatRewardConfig) -> None:
        try:
            re.compile(cfg.pattern)
        except re.error as exc:
            raise ValueError(f"reward.pattern={cfg.pattern!r} is not a valid regular expression: {exc}") from None
        super().__init__(functools.partial(verify, cfg), cfg, ("response_text",), components=["format"])
