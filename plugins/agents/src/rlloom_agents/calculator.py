"""The tool ``calculator``: exact arithmetic on integers and decimals.

An expression of numbers, ``+ - * / // % **``, unary signs and parentheses, parsed with :mod:`ast`
(never ``eval``): anything else is refused with the reason. Integer results are exact at any size up
to :data:`MAX_DIGITS` digits; ``**`` takes exponents up to :data:`MAX_EXPONENT`.
"""

from __future__ import annotations

import ast
import operator
from typing import Any

from rlloom.data import PromptRecord

MAX_DIGITS = 1000
MAX_EXPONENT = 100
OPERATORS = {ast.Add: operator.add, ast.Sub: operator.sub, ast.Mult: operator.mul, ast.Div: operator.truediv,
             ast.FloorDiv: operator.floordiv, ast.Mod: operator.mod, ast.Pow: operator.pow}


def evaluate(expression: str) -> int | float:
    """The value of ``expression`` (see the module doc); ValueError saying what is not allowed."""
    try:
        tree = ast.parse(expression.strip(), mode="eval")
    except SyntaxError:
        raise ValueError(f"not an arithmetic expression: {expression!r}") from None
    return _value(tree.body)


def _value(node: ast.AST) -> int | float:
    if isinstance(node, ast.Constant) and type(node.value) in (int, float):
        return node.value
    if isinstance(node, ast.UnaryOp) and isinstance(node.op, (ast.UAdd, ast.USub)):
        operand = _value(node.operand)
        return operand if isinstance(node.op, ast.UAdd) else -operand
    if isinstance(node, ast.BinOp) and type(node.op) in OPERATORS:
        left, right = _value(node.left), _value(node.right)
        if isinstance(node.op, ast.Pow) and abs(right) > MAX_EXPONENT:
            raise ValueError(f"exponents above {MAX_EXPONENT} are not allowed")
        result = OPERATORS[type(node.op)](left, right)
        if isinstance(result, int) and abs(result) >= 10**MAX_DIGITS:
            raise ValueError(f"the result has more than {MAX_DIGITS} digits")
        return result
    raise ValueError(f"only numbers, + - * / // % ** and parentheses are allowed, not {type(node).__name__}")


class Calculator:
    """``tool=calculator`` (:class:`~rlloom.protocols.Tool`)."""

    name = "calculator"
    description = "Evaluate an arithmetic expression exactly, e.g. 1234*5678 or (7+5)/4."
    parameters: dict[str, Any] = {
        "type": "object",
        "properties": {"expression": {"type": "string", "description": "the expression to evaluate"}},
        "required": ["expression"],
    }

    async def __call__(self, arguments: dict[str, Any], row: PromptRecord) -> str:
        try:
            return str(evaluate(arguments["expression"]))
        except ZeroDivisionError:
            raise ValueError("division by zero") from None
