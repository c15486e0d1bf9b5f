"""``data=arithmetic``: one-operation integer problems as chat prompts.

The problems are every ordered pair ``(a, b)`` with ``0 <= a, b < 10**digits`` for every operation
in ``operations`` (``+``, ``-``, ``*``): ``len(operations) * 10**(2 * digits)`` distinct problems
(100 for the default 1-digit addition). They are shuffled with ``random.Random(seed)``; the
first ``num_val`` are the validation split, the next ``num_train`` the training split
(``num_train = 0``: every remaining problem). Defaults: 64 val, 36 train.

Each record: ``prompt = [{"role": "user", "content": template.format(a=..., op=..., b=...)}]``,
``ground_truth`` the exact result as a string (``"-3"`` for 2-5), ``data_source = "arithmetic"``,
``extra = {"expression": "2-5"}``.
"""

from __future__ import annotations

import string
from dataclasses import dataclass, field

from rlloom.data import PromptRecord, Splits, seeded_split


OPERATIONS = {"+": lambda a, b: a + b, "-": lambda a, b: a - b, "*": lambda a, b: a * b}
MAX_PROBLEMS = 1_000_000  # the problem set is enumerated and shuffled in memory


@dataclass
class ArithmeticDataConfig:
    """Options of ``data=arithmetic`` (see the module doc)."""

    digits: int = 1  # digits of each operand
    operations: list[str] = field(default_factory=lambda: ["+"])  # operators drawn from: +, -, *
    num_val: int = 64  # validation prompts (disjoint from training)
    num_train: int = 0  # 0: every problem not in val
    template: str = "What is {a}{op}{b}? Reply with only the number."  # the question; {a}, {op}, {b} are filled in


def _num_problems(cfg: ArithmeticDataConfig) -> int:
    """How many distinct problems ``cfg`` describes, after checking every field."""
    if cfg.digits < 1:
        raise ValueError(f"data.digits must be >= 1, got {cfg.digits}")
    unknown = [op for op in cfg.operations if op not in OPERATIONS]
    if unknown or not cfg.operations or len(set(cfg.operations)) != len(cfg.operations):
        raise ValueError(
            f"data.operations={list(cfg.operations)} must be distinct, non-empty and from {sorted(OPERATIONS)}"
        )
    fields = {name for _, name, _, _ in string.Formatter().parse(cfg.template) if name is not None}
    required = {"a", "b"} | ({"op"} if len(cfg.operations) > 1 else set())
    if fields - {"a", "b", "op"} or required - fields:
        raise ValueError(
            f"data.template={cfg.template!r} must use the fields {sorted(required)} "
            f"(and optionally 'op') and no others; it uses {sorted(fields)}"
        )
    total = len(cfg.operations) * 10 ** (2 * cfg.digits)
    if total > MAX_PROBLEMS:
        raise ValueError(
            f"data.digits={cfg.digits} with {len(cfg.operations)} operation(s) gives {total} problems, "
            f"more than the {MAX_PROBLEMS} this dataset enumerates; use fewer digits or operations"
        )
    return total


def _record(cfg: ArithmeticDataConfig, index: int) -> PromptRecord:
    """Problem ``index`` of the enumeration: operation-major, then ``a``, then ``b``."""
    size = 10**cfg.digits
    op_index, pair = divmod(index, size * size)
    a, b = divmod(pair, size)
    op = cfg.operations[op_index]
    return PromptRecord(
        prompt=[{"role": "user", "content": cfg.template.format(a=a, op=op, b=b)}],
        ground_truth=str(OPERATIONS[op](a, b)),
        data_source="arithmetic",
        extra={"expression": f"{a}{op}{b}"},
    )


def build_arithmetic(cfg: ArithmeticDataConfig, seed: int) -> Splits:
    """The dataset of the module doc; ``ValueError`` names the offending config field."""
    train, val = seeded_split(range(_num_problems(cfg)), seed, cfg.num_val, cfg.num_train, "arithmetic")
    return Splits(train=[_record(cfg, i) for i in train], val=[_record(cfg, i) for i in val])
