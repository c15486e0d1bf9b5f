"""``data=files``: prompts from the user's own JSONL / Parquet files or saved Hugging Face datasets.

Files are read by :mod:`rlloom_tasks.data.readers`. Each row becomes a
:class:`~rlloom.data.PromptRecord` through the column mapping:

- ``prompt_column``: either a list of chat messages (``[{"role": ..., "content": ...}, ...]``, both
  strings) rendered with the tokenizer's chat template, or a non-empty string, which is wrapped in
  one user message when ``string_prompts=chat`` and tokenized as it is when ``string_prompts=raw``;
- ``ground_truth_column``: copied as it is (must be present and not null); ``""``: no ground truth
  (``None``, e.g. for ``reward=model``);
- ``data_source_column``: a non-empty string per row; ``""``: every row gets ``data_source``;
- ``extra_columns``: copied into ``PromptRecord.extra`` (each must be present).

Files: ``train_files`` and ``val_files`` are lists of paths; one path alone is a list of one
(``data.train_files=task.jsonl``).

Splits: the rows of ``train_files`` train; the rows of ``val_files`` validate. Without
``val_files``, ``val_fraction`` (default 0.1) of the training rows (``round(fraction * rows)``, at
least 1) are held out for validation, chosen by ``random.Random(seed)``, and a line on stderr says
how many; both splits keep file order. A run needs at least one row in each split.

A malformed row (unreadable line, missing column, wrong type) raises ``ValueError`` naming the
file and the line/row; with ``skip_invalid=true`` it is skipped instead, counted in the result's
``num_invalid`` (its messages in ``invalid``), and a warning says how many were skipped.
"""

from __future__ import annotations

import random
import sys
import warnings
from dataclasses import dataclass, field
from enum import Enum
from typing import Any

from rlloom.data import PromptRecord

from rlloom_tasks.data.readers import RawRow, check_path, read_rows


class StringPrompts(Enum):
    """How a string prompt is used."""

    chat = "chat"  # wrapped in one user message (chat template applied)
    raw = "raw"  # tokenized as it is


@dataclass
class FilesDataConfig:
    """Options of ``data=files`` (see the module doc)."""

    train_files: Any = field(default_factory=list)  # a list of paths, or one path
    val_files: Any = field(default_factory=list)  # a list of paths, or one path
    val_fraction: float = 0.1  # held out of the training rows when val_files is empty
    prompt_column: str = "prompt"  # the column holding the prompt (a string or chat messages)
    ground_truth_column: str = "ground_truth"  # "": no ground truth
    data_source_column: str = ""  # "": every row gets data_source
    data_source: str = "files"  # the rows' data source: metrics are per source (val-core/<source>/...)
    extra_columns: list[str] = field(default_factory=list)  # columns kept in each record's extra (reward arguments)
    string_prompts: StringPrompts = StringPrompts.chat  # a string prompt: chat (a user message) or raw (as it is)
    hf_train_split: str = "train"  # split read from a saved DatasetDict in train_files
    hf_val_split: str = "test"  # split read from a saved DatasetDict in val_files
    skip_invalid: bool = False  # skip malformed rows (counted in data/invalid_rows) instead of failing

    def __post_init__(self) -> None:
        _check(self)


@dataclass(frozen=True)
class FileSplits:
    """Train and val prompts (a :class:`rlloom.protocols.PromptDataset`) and what was skipped."""

    train: list[PromptRecord]
    val: list[PromptRecord]
    num_invalid: int = 0
    invalid: list[str] = field(default_factory=list)


class InvalidRow(ValueError):
    """A row that cannot become a prompt record; the message says why."""


def _prompt(value: Any, cfg: FilesDataConfig) -> list[dict[str, str]] | str:
    column = cfg.prompt_column
    if isinstance(value, str):
        if not value.strip():
            raise InvalidRow(f"column {column!r} is an empty string")
        if StringPrompts(cfg.string_prompts) == StringPrompts.raw:
            return value
        return [{"role": "user", "content": value}]
    if isinstance(value, list) and value:
        for i, message in enumerate(value):
            if not (isinstance(message, dict) and isinstance(message.get("role"), str)
                    and isinstance(message.get("content"), str)):
                raise InvalidRow(f"column {column!r} message {i} is not {{'role': str, 'content': str}}: {message!r}")
        return [{"role": message["role"], "content": message["content"]} for message in value]
    raise InvalidRow(f"column {column!r} must be a non-empty string or list of chat messages, got {value!r}")


def to_record(row: Any, cfg: FilesDataConfig) -> PromptRecord:
    """The record of one row; :class:`InvalidRow` says what is wrong with it."""
    if not isinstance(row, dict):
        raise InvalidRow(f"a row must be an object of columns, got {type(row).__name__}")
    wanted = [cfg.prompt_column, cfg.ground_truth_column, cfg.data_source_column, *cfg.extra_columns]
    missing = [name for name in wanted if name and name not in row]
    if missing:
        raise InvalidRow(f"missing column(s) {missing} (the row has {sorted(row)})")
    ground_truth = None
    if cfg.ground_truth_column:
        ground_truth = row[cfg.ground_truth_column]
        if ground_truth is None:
            raise InvalidRow(f"column {cfg.ground_truth_column!r} is null")
    data_source = cfg.data_source
    if cfg.data_source_column:
        data_source = row[cfg.data_source_column]
        if not isinstance(data_source, str) or not data_source:
            raise InvalidRow(f"column {cfg.data_source_column!r} must be a non-empty string, got {data_source!r}")
    return PromptRecord(
        prompt=_prompt(row[cfg.prompt_column], cfg),
        ground_truth=ground_truth,
        data_source=data_source,
        extra={name: row[name] for name in cfg.extra_columns},
    )


def _records(key: str, hf_split: str, cfg: FilesDataConfig, invalid: list[str]) -> list[PromptRecord]:
    """The records of every row of the files ``cfg.<key>`` (:func:`_record` of each)."""
    records = []
    for path in getattr(cfg, key):
        for raw in read_rows(path, hf_split, f"data.{key}"):
            record = _record(raw, cfg, invalid)
            if record is not None:
                records.append(record)
    return records


def _record(raw: RawRow, cfg: FilesDataConfig, invalid: list[str]) -> PromptRecord | None:
    """The record of one read row. A row that cannot be one raises ValueError naming its location, or with
    ``skip_invalid`` is noted in ``invalid`` and gives None."""
    try:
        if raw.error:
            raise InvalidRow(raw.error)
        return to_record(raw.value, cfg)
    except InvalidRow as exc:
        message = f"{raw.location}: {exc}"
        if not cfg.skip_invalid:
            raise ValueError(f"data=files: {message} (set data.skip_invalid=true to skip such rows)") from None
        invalid.append(message)
        return None


def _paths(value: Any, key: str) -> list[str]:
    """``value`` as a list of paths: one path is a list of one."""
    if isinstance(value, str):
        return [value] if value else []
    if isinstance(value, (list, tuple)) and all(isinstance(path, str) for path in value):
        return list(value)
    raise ValueError(f"{key} must be a path or a list of paths, got {value!r}")


def _check(cfg: FilesDataConfig) -> None:
    cfg.train_files = _paths(cfg.train_files, "data.train_files")
    cfg.val_files = _paths(cfg.val_files, "data.val_files")
    if not cfg.train_files:
        raise ValueError("data=files needs data.train_files, e.g. data.train_files=[train.jsonl]")
    if not cfg.val_files and not 0.0 < cfg.val_fraction < 1.0:
        raise ValueError(
            f"data=files needs validation prompts: set data.val_files, or data.val_fraction in (0, 1) "
            f"(got {cfg.val_fraction})"
        )
    for key in ("train_files", "val_files"):
        for path in getattr(cfg, key):
            check_path(path, f"data.{key}")
            if path.endswith(".jsonl") and not cfg.skip_invalid:
                _check_first_row(path, key, cfg)


def _check_first_row(path: str, key: str, cfg: FilesDataConfig) -> None:
    """:func:`_record` of the first row of the JSONL file ``path``: a row that cannot be a record (a mistyped
    column name) is refused when the config is composed, before any run folder is made."""
    first = next(read_rows(path, "", f"data.{key}"), None)
    if first is not None:
        _record(first, cfg, [])


def build_files(cfg: FilesDataConfig, seed: int) -> FileSplits:
    """The dataset of the module doc; ``ValueError`` names the offending field, file or row."""
    invalid: list[str] = []
    train = _records("train_files", cfg.hf_train_split, cfg, invalid)
    if cfg.val_files:
        val = _records("val_files", cfg.hf_val_split, cfg, invalid)
    else:
        order = list(range(len(train)))
        random.Random(seed).shuffle(order)
        chosen = set(order[: max(1, round(cfg.val_fraction * len(train)))])
        val = [record for i, record in enumerate(train) if i in chosen]
        train = [record for i, record in enumerate(train) if i not in chosen]
        print(f"rlloom: data=files: {len(val)} of the {len(val) + len(train)} training rows held out for validation "
              f"(data.val_fraction={cfg.val_fraction}; data.val_files=[...] validates on your own rows)",
              file=sys.stderr, flush=True)
    if not train or not val:
        raise ValueError(
            f"data=files: {len(train)} training and {len(val)} validation prompts; each split needs at least one "
            f"(train_files={list(cfg.train_files)}, val_files={list(cfg.val_files)}, val_fraction={cfg.val_fraction})"
        )
    if invalid:
        warnings.warn(f"data=files: skipped {len(invalid)} invalid row(s); first: {invalid[0]}", stacklevel=2)
    return FileSplits(train=train, val=val, num_invalid=len(invalid), invalid=invalid)
