"""Answer extraction on hand-written cases."""

import pytest
from rlloom_rewardkit.extract import answer_tag, boxed_content, gsm8k_answer, last_integer, last_number


@pytest.mark.parametrize(
    "text, number, integer",
    [
        ("-3", "-3", -3),
        ("1,234", "1234", 1234),
        ("-1,234,567 in total", "-1234567", -1234567),
        ("2 + 10 = 12.", "12", 12),
        ("The answer is 7.", "7", 7),
        ("12 apples, then some more apples", "12", 12),
        ("5-3", "3", 3),  # a minus after an operand is an operator
        ("x = -4, so", "-4", -4),
        ("(-3)", "-3", -3),
        ("\u22122", "-2", -2),  # Unicode minus sign
        ("3, 4, 5", "5", 5),  # ", " is a list separator, not a thousands separator
        ("about 7.5", "7.5", None),  # last number is not whole: no integer
        ("12.50 dollars", "12.50", None),
        ("it is 12.0", "12.0", 12),
        ("I think 3, no wait, 4", "4", 4),
        ("no number here", None, None),
        ("", None, None),
    ],
)
def test_last_number_and_last_integer(text, number, integer):
    assert last_number(text) == number
    assert last_integer(text) == integer


@pytest.mark.parametrize(
    "text, expected",
    [
        (r"so \boxed{42}.", "42"),
        (r"\boxed{\frac{1}{2}}", r"\frac{1}{2}"),
        (r"first \boxed{1} then \boxed{ {a}{b} }", "{a}{b}"),
        (r"\boxed {7}", "7"),
        (r"good \boxed{3} then broken \boxed{4", "3"),  # unclosed last box is skipped
        ("no box at all", None),
        (r"\boxed{unclosed", None),
    ],
)
def test_boxed_content(text, expected):
    assert boxed_content(text) == expected


@pytest.mark.parametrize(
    "text, expected",
    [
        ("She has 18 left.\n#### 18", "18"),
        ("#### 1,018", "1018"),
        ("#### -7\n", "-7"),
        ("#### 3.25", "3.25"),
        ("#### 5 then later #### 6", "6"),
        ("#### no number", None),
        ("the answer is 5", None),
    ],
)
def test_gsm8k_answer(text, expected):
    assert gsm8k_answer(text) == expected


@pytest.mark.parametrize(
    "text, expected",
    [
        ("<think>4+4</think><answer> 8 </answer>", "8"),
        ("<answer>1</answer> oops <answer>2</answer>", "2"),
        ("<answer>\nline one\nline two\n</answer>", "line one\nline two"),
        ("<answer>unclosed", None),
        ("plain 8", None),
    ],
)
def test_answer_tag(text, expected):
    assert answer_tag(text) == expected


def test_answer_tag_other_tag_name():
    assert answer_tag("<final>x</final><answer>y</answer>", tag="final") == "x"
