"""Answer extraction from free-text model responses. Pure functions: text in, answer (or None) out.

Every function returns ``None`` when the text holds no answer of its kind, never raises on any
string input.

Numbers are returned in a normal form: a leading ``-`` for negative numbers (the Unicode minus
``−`` is read as ``-``), thousands separators removed (``1,234`` → ``1234``), the fractional part
kept as written (``12.50`` stays ``12.50``).
"""

from __future__ import annotations

import re

_MINUS = "-−"

# A number: an optional sign, then either comma-grouped thousands (1,234,567) or plain digits,
# then an optional fractional part. A sentence-ending period ("= 12.") is not a fraction because
# a fraction needs at least one digit after the point.
_NUMBER = re.compile(
    rf"(?P<sign>[{_MINUS}])?(?P<int>\d{{1,3}}(?:,\d{{3}})+(?!\d)|\d+)(?:\.(?P<frac>\d+))?"
)
# Characters after which a minus is a binary operator ("5-3"), not the sign of what follows.
_OPERAND_END = re.compile(r"[\w)\]}]")

_GSM8K_MARKER = re.compile(r"####[ \t]*")

_BOXED = re.compile(r"\\boxed\s*\{")


def _normalize(match: re.Match[str]) -> str:
    """A ``_NUMBER`` match in normal form; a minus right after an operand is not a sign."""
    text = match.string
    negative = match.group("sign") is not None and not (
        match.start() > 0 and _OPERAND_END.match(text[match.start() - 1])
    )
    number = match.group("int").replace(",", "")
    if match.group("frac") is not None:
        number += "." + match.group("frac")
    return "-" + number if negative else number


def _numbers(text: str) -> list[str]:
    """Every number in ``text``, left to right, in the module's normal form."""
    return [_normalize(match) for match in _NUMBER.finditer(text)]


def last_number(text: str) -> str | None:
    """The last number in ``text`` in normal form, e.g. ``"The answer is -1,234.5."`` → ``"-1234.5"``.

    A minus directly after a letter, digit or closing bracket is an operator, so ``"5-3"`` holds
    the numbers ``5`` and ``3``.
    """
    numbers = _numbers(text)
    return numbers[-1] if numbers else None


def last_integer(text: str) -> int | None:
    """The value of the last number in ``text`` if that number is whole, else ``None``.

    ``"= 12."`` → ``12``, ``"12.0"`` → ``12``, ``"about 7.5"`` → ``None`` (the last number is
    not whole; an earlier integer is not used instead).
    """
    number = last_number(text)
    if number is None:
        return None
    integer, _, fraction = number.partition(".")
    if fraction.strip("0"):
        return None
    return int(integer)


def boxed_content(text: str) -> str | None:
    """The stripped content of the last well-formed ``\\boxed{...}``; nested braces are kept.

    ``"so \\boxed{\\frac{1}{2}}"`` → ``"\\frac{1}{2}"``. A ``\\boxed{`` whose braces never close
    is skipped.
    """
    content = None
    for match in _BOXED.finditer(text):
        depth = 1
        for position in range(match.end(), len(text)):
            if text[position] == "{":
                depth += 1
            elif text[position] == "}":
                depth -= 1
                if depth == 0:
                    content = text[match.end() : position].strip()
                    break
    return content


def gsm8k_answer(text: str) -> str | None:
    """The number after the last GSM8K-style ``####`` marker, in normal form.

    ``"... so she has 18 left.\\n#### 1,018"`` → ``"1018"``.
    """
    markers = list(_GSM8K_MARKER.finditer(text))
    if not markers:
        return None
    number = _NUMBER.match(text, markers[-1].end())
    return _normalize(number) if number else None


def answer_tag(text: str, tag: str = "answer") -> str | None:
    """The stripped content of the last ``<tag>...</tag>`` pair (may span lines).

    ``"<think>4+4</think><answer> 8 </answer>"`` → ``"8"``.
    """
    matches = re.findall(rf"<{re.escape(tag)}>(.*?)</{re.escape(tag)}>", text, flags=re.DOTALL)
    return matches[-1].strip() if matches else None
