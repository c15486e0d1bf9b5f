"""The dataset ``calculator``: multiplications of two ``digits``-digit numbers, which a small model cannot
do in its head but can with the calculator tool (``agent=tools``, the default tool).

Each prompt is ``shots`` worked examples — a question, the assistant's ``<tool_call>`` to the
calculator, the tool's answer, the assistant's final answer — then the question itself, as chat
messages; the examples' numbers are drawn once from ``random.Random(seed)`` and are never asked.
``ground_truth`` is the product (``reward=arithmetic`` checks the response's last integer). The
questions are the pairs ``(a, b)`` with ``digits`` digits each, shuffled with the run's seed:
``num_val`` validate, the next ``num_train`` train.
"""

from __future__ import annotations

import json
import random

from rlloom.data import PromptRecord, Splits, seeded_split
from rlloom_agents.config import CalculatorDataConfig

QUESTION = "What is {a}*{b}?"


def tool_call(expression: str) -> str:
    """The assistant turn that asks the calculator for ``expression`` (the Hermes format)."""
    return "<tool_call>\n" + json.dumps({"name": "calculator", "arguments": {"expression": expression}}) + "\n</tool_call>"


def worked_example(a: int, b: int) -> list[dict[str, str]]:
    """One shot: the question, the call, the tool's answer, the final answer."""
    product = str(a * b)
    return [{"role": "user", "content": QUESTION.format(a=a, b=b)},
            {"role": "assistant", "content": tool_call(f"{a}*{b}")},
            {"role": "tool", "content": product},
            {"role": "assistant", "content": product}]


def build_calculator(cfg: CalculatorDataConfig, seed: int) -> Splits:
    """The dataset of the module doc; a ValueError names the sizes that do not fit."""
    low, high = 10 ** (cfg.digits - 1), 10**cfg.digits
    side = high - low
    rng = random.Random(seed)
    shots = [(rng.randrange(low, high), rng.randrange(low, high)) for _ in range(cfg.shots)]
    examples = [message for a, b in shots for message in worked_example(a, b)]
    asked_in_examples = {(a - low) * side + (b - low) for a, b in shots}
    pairs = [index for index in range(side * side) if index not in asked_in_examples]
    train, val = seeded_split(pairs, seed, cfg.num_val, cfg.num_train, "calculator")

    def record(index: int) -> PromptRecord:
        a, b = (low + part for part in divmod(index, side))
        return PromptRecord([*examples, {"role": "user", "content": QUESTION.format(a=a, b=b)}], str(a * b),
                            "calculator", {"expression": f"{a}*{b}"})

    return Splits([record(index) for index in train], [record(index) for index in val])
