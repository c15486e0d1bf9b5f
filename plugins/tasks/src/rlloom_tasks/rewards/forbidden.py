"""``reward=forbidden_digits``: 1.0 when the response contains a forbidden digit, else 0.0.

A synthetic *cost* for ``algorithm=safe_rlhf`` on ``data=digits`` (``cost=forbidden_digits``):
``reward=digit_fraction`` pays for digits, this cost counts the responses that use any character of
``digits`` (default ``"01234"``), so a constrained policy learns to answer with the other digits.
Score per row: ``1.0`` if any character of the response is in ``digits``, else ``0.0``;
``error_score`` when the row cannot be checked. Component ``forbidden``. ``num_workers`` /
``timeout_s`` / ``timeout_score``: as for every row-scored reward (:mod:`rlloom_rewardkit.runner`).
"""

from __future__ import annotations

import functools
from dataclasses import dataclass

from rlloom_rewardkit import ExecutionConfig, RowReward, Verdict


@dataclass
class ForbiddenDigitsRewardConfig(ExecutionConfig):
    """Options of ``reward=forbidden_digits`` (see the module doc)."""

    digits: str = "01234"  # the forbidden characters: a response using any costs 1.0

    def __post_init__(self) -> None:
        super().__post_init__()
        if not self.digits or not all(c.isdigit() for c in self.digits):
            raise ValueError(f"digits must be a non-empty string of digits such as '01234', got {self.digits!r}")


def verify(forbidden: frozenset[str], response: str) -> Verdict:
    """One row's verdict: does ``response`` hold a character of ``forbidden``?"""
    if not isinstance(response, str):
        raise TypeError(f"response_text must be a string, got {type(response).__name__}")
    found = float(any(c in forbidden for c in response))
    return Verdict(found, {"forbidden": found})


class ForbiddenDigitsReward(RowReward):
    """See the module doc."""

    def __init__(self, cfg: ForbiddenDigitsRewardConfig) -> None:
        super().__init__(functools.partial(verify, frozenset(cfg.digits)), cfg, ("response_text",),
                         components=["forbidden"])
