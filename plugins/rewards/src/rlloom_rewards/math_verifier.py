"""Answer extraction and equivalence for ``reward=math`` (see :mod:`rlloom_rewards.math_answer`).

Torch-free, so that reward worker processes import it quickly.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass
from typing import Any

from rlloom_rewardkit import extract
from rlloom_rewardkit.outcome import Verdict


def _parse(text: str) -> list:
    from math_verify import parse  # imports sympy: only when the first row is scored

    return parse(text, parsing_timeout=None)


def parse_response(response: str) -> list:
    """math-verify's parse of the response's answer, found in the order :mod:`rlloom_rewards.math_answer`
    describes; ``[]``: no answer."""
    boxed = extract.boxed_content(response)
    if boxed is not None:
        return _parse(f"\\boxed{{{boxed}}}")
    tagged = extract.answer_tag(response)
    if tagged is not None:
        return _parse(tagged)
    marked = extract.gsm8k_answer(response)
    if marked is not None:
        return _parse(marked)
    return _parse(response)


@functools.lru_cache(maxsize=4096)
def parse_ground_truth(ground_truth: str) -> list:
    """math-verify's parse of a ground truth string; ``ValueError`` when nothing can be parsed."""
    text = ground_truth
    if "####" in text:
        text = extract.gsm8k_answer(text) or ""
    parsed = _parse(f"${text}$") or _parse(text)
    if not parsed:
        raise ValueError(f"the ground truth {ground_truth!r} is not a mathematical answer math-verify can parse")
    return parsed


@dataclass(frozen=True)
class MathVerifier:
    """Scores one response against its ground truth (picklable, for worker processes)."""

    correct_score: float = 1.0
    incorrect_score: float = 0.0
    float_rounding: int = 6

    def __call__(self, response: str, ground_truth: Any) -> Verdict:
        from math_verify import verify

        if not isinstance(ground_truth, (str, int, float)) or isinstance(ground_truth, bool):
            raise TypeError(f"the ground truth must be a string or a number, got {type(ground_truth).__name__}")
        gold = parse_ground_truth(str(ground_truth))
        answer = parse_response(response)
        correct = bool(answer) and verify(gold, answer, float_rounding=self.float_rounding, timeout_seconds=None)
        return Verdict(
            self.correct_score if correct else self.incorrect_score,
            {"correct": float(correct), "extracted": float(bool(answer))},
        )
