"""``reward=reasoning_gym``: score responses with reasoning-gym's own verifiers.

Reads the object fields ``response_text`` and ``extra``: per row the dict that ``data=reasoning_gym``
puts in ``PromptRecord.extra`` (``entry``: the reasoning-gym entry, ``task``: its task name,
``task_config``: the task's generator options). The answer is extracted from the response as
``answer_format`` says (default: the content of the last ``<answer>...</answer>``, which the
dataset's instruction asks for), then scored by ``score_answer(answer, entry)`` of a dataset of
that task and config (``answer`` is ``None`` when extraction finds nothing; reasoning-gym scores
that low). The score is reasoning-gym's, in [0, 1]; ``error_score`` when a verifier raises or
the row's ``extra`` is malformed.

Components: ``correct`` (1.0 when the score is 1.0) and ``format`` (1.0 when an answer was
extracted). ``num_workers`` / ``timeout_s`` / ``timeout_score``: as for every row-scored reward
(:mod:`rlloom_rewardkit.runner`).
"""

from __future__ import annotations

import functools
import json
from collections.abc import Callable
from dataclasses import dataclass
from enum import Enum
from typing import Any

from rlloom_rewardkit import ExecutionConfig, RowReward, Verdict
from rlloom_rewardkit import extract


class AnswerFormat(Enum):
    """Where the answer sits in a response."""

    answer_tag = "answer_tag"  # last <answer>...</answer>
    boxed = "boxed"  # last \boxed{...}
    last_number = "last_number"  # last number in the text
    gsm8k = "gsm8k"  # number after the last ####
    whole = "whole"  # the whole response, stripped


EXTRACTORS: dict[AnswerFormat, Callable[[str], str | None]] = {
    AnswerFormat.answer_tag: extract.answer_tag,
    AnswerFormat.boxed: extract.boxed_content,
    AnswerFormat.last_number: extract.last_number,
    AnswerFormat.gsm8k: extract.gsm8k_answer,
    AnswerFormat.whole: str.strip,
}

ScoreAnswer = Callable[[str | None, dict[str, Any]], float]


@dataclass
class ReasoningGymRewardConfig(ExecutionConfig):
    """Options of ``reward=reasoning_gym`` (see the module doc)."""

    answer_format: AnswerFormat = AnswerFormat.answer_tag  # answer_tag, boxed, last_number or gsm8k


_VERIFIERS: dict[tuple[str, str], ScoreAnswer] = {}  # per process: workers build their own


def verifier(task: str, task_config: dict[str, Any]) -> ScoreAnswer:
    """``score_answer`` of a reasoning-gym dataset of ``task`` built with ``task_config``; built once
    per (task, task_config) in each process and reused."""
    key = (task, json.dumps(task_config, sort_keys=True, default=repr))
    if key not in _VERIFIERS:
        import reasoning_gym  # slow to import: only when the first row is scored

        dataset = reasoning_gym.create_dataset(task, **{**task_config, "size": 1, "seed": 0})
        _VERIFIERS[key] = dataset.score_answer
    return _VERIFIERS[key]


def verify(answer_format: AnswerFormat, response: str, extra: dict[str, Any]) -> Verdict:
    """One row's verdict (see the module doc)."""
    score_answer = verifier(extra["task"], extra["task_config"])
    answer = EXTRACTORS[answer_format](response)
    score = float(score_answer(answer, extra["entry"]))
    return Verdict(score, {"correct": float(score >= 1.0), "format": float(answer is not None)})


class ReasoningGymReward(RowReward):
    """See the module doc."""

    def __init__(self, cfg: ReasoningGymRewardConfig) -> None:
        super().__init__(functools.partial(verify, AnswerFormat(cfg.answer_format)), cfg, ("response_text", "extra"),
                         components=["correct", "format"])
