"""Declarative limits (rlloom.config.limits): ranges and choices as data, every bad key named as typed."""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import ClassVar, Optional

import pytest
from rlloom.config.limits import Limited, limit_problems, within


@pytest.mark.parametrize(("value", "rule", "expected"), [
    (1, ">= 1", True), (0, ">= 1", False), (0.0, "> 0", False), (1e-9, "> 0", True),
    (1, "<= 1", True), (1, "< 1", False), (0, "in [0, 1]", True), (0, "in (0, 1]", False),
    (1, "in (0, 1]", True), (1, "in [0, 1)", False), (1e30, "in [0, inf)", True), (math.inf, "in [0, inf)", False),
    (math.nan, ">= 0", False), (math.nan, "in [0, 1]", False), (-1, "in [-1, 1]", True),
])
def test_a_range_rule_reads_as_written(value, rule, expected):
    assert within(value, rule) is expected


def test_a_rule_that_is_no_range_says_how_to_write_one():
    with pytest.raises(ValueError, match=r"limit 'between 0 and 1': write '>= x'"):
        within(0.5, "between 0 and 1")


@dataclass
class Base(Limited):
    section: ClassVar[str] = "rollout"
    limits: ClassVar[dict] = {"size": ">= 1", "dtype": ("float32", "bfloat16"), "share": "in (0, 1]"}

    size: int = 1
    dtype: str = "float32"
    share: Optional[float] = None


@dataclass
class Child(Base):
    limits: ClassVar[dict] = {"size": ">= 2", "depth": ">= 0"}

    depth: int = 0


def test_every_bad_key_is_named_as_the_user_types_it_in_one_error():
    with pytest.raises(ValueError) as error:
        Base(size=0, dtype="bfloat", share=1.5)
    assert str(error.value) == ("rollout.size=0: must be >= 1; rollout.dtype=bfloat: must be one of float32, "
                                "bfloat16. Did you mean 'bfloat16'?; rollout.share=1.5: must be in (0, 1] (or null)")


def test_none_is_unset_and_a_subclass_rule_replaces_its_base_rule():
    assert limit_problems(Base(share=None), "rollout") == []
    assert limit_problems(Child(size=2), "rollout") == []
    with pytest.raises(ValueError, match=r"^rollout\.size=1: must be >= 2; rollout\.depth=-1: must be >= 0$"):
        Child(size=1, depth=-1)
