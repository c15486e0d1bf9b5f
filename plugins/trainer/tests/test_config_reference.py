"""The config reference is read from the schemas (types, defaults, the comment after each field) and
docs/config-reference.md is what ``rlloom plugins --reference`` prints today."""

from __future__ import annotations

import enum
from dataclasses import dataclass, field
from pathlib import Path

from rlloom.cli import main
from rlloom.plugins.registry import get_registry
from rlloom_trainer.config_reference import Key, docstring_keys, keys, option_text, reference_markdown

REFERENCE = Path(__file__).parents[3] / "docs" / "config-reference.md"


class Mode(enum.Enum):
    fast = "fast"


@dataclass
class Base:
    """A base."""

    workers: int = 0  # processes; 0: this one


@dataclass
class Inner:
    rank: int = 8  # adapter rank


@dataclass
class Sample(Base):
    """A sample section.

    More prose."""

    name: str = ""
    mode: Mode = Mode.fast  # how fast
    sizes: list[int] = field(default_factory=lambda: [1, 2])
    path: str | None = None
    inner: Inner = field(default_factory=Inner)
    needed: float = field(default=1.5)  # units: seconds


def test_keys_hold_types_defaults_and_the_comment_after_each_field_bases_and_nesting_included():
    assert keys(Sample) == [
        Key("workers", "int", "0", "processes; 0: this one"),
        Key("name", "str", '""', ""),
        Key("mode", "Mode", "fast", "how fast"),
        Key("sizes", "list[int]", "[1,2]", ""),
        Key("path", "str | None", "null", ""),
        Key("inner.rank", "int", "8", "adapter rank"),
        Key("needed", "float", "1.5", "units: seconds"),
    ]


def test_the_committed_reference_is_current():
    assert REFERENCE.read_text() == reference_markdown(get_registry()), (
        "docs/config-reference.md is stale: regenerate it with `rlloom plugins --reference > docs/config-reference.md`")


def test_one_option_is_described_with_its_keys(capsys):
    text = option_text(get_registry(), "python")
    assert text.startswith("reward=python  (rlloom-rewards ") and "a user's own Python function" in text
    assert "  reward.function: str = \"\"  # " in text and "tool python" in text  # the reward and the tool
    assert main(["plugins", "python"]) == 0 and capsys.readouterr().out.strip() == text


def test_an_unknown_name_is_a_usage_error_listing_the_names(capsys):
    assert main(["plugins", "pythn"]) == 2
    err = capsys.readouterr().err
    assert "'pythn'" in err and "python" in err and err.count("\n") == 1


class Documented:
    """Settings.

    - ``timeout_s``, ``connect_timeout_s``: how long to wait, seconds. More about it.
    - ``retries`` (a count): sends again, e.g. ``3`` times; ``backoff_s``: the first wait. Doubled after.
    - not a key: no colon here
    """


def test_keys_are_read_from_docstring_bullets_when_the_field_has_no_comment():
    assert docstring_keys(Documented) == {
        "timeout_s": "how long to wait, seconds.", "connect_timeout_s": "how long to wait, seconds.",
        "retries": "sends again, e.g. ``3`` times", "backoff_s": "the first wait."}


def test_every_key_of_every_in_tree_option_is_described():
    undescribed = sorted({line.split("|")[1].strip() for line in REFERENCE.read_text().splitlines()
                          if line.startswith("| `") and line.rstrip().endswith("|  |")})
    assert undescribed == [], f"keys without a comment after the field or a docstring bullet: {undescribed}"
