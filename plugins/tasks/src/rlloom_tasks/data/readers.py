"""Rows of user data files, each with where it came from (for error messages).

Formats, by path:

- ``*.jsonl``: JSON Lines in UTF-8, one object per line (blank lines are ignored, a byte-order mark
  at the start is accepted); location ``<path> line N``;
- ``*.parquet``: read with ``pyarrow``; location ``<path> row N`` (1-based);
- a directory written by ``datasets.Dataset.save_to_disk`` (or ``DatasetDict.save_to_disk``: then
  the split ``hf_split`` is read); location ``<path> row N``.

A JSONL line that is not UTF-8 or not valid JSON is yielded as a :class:`RawRow` whose ``error``
says so (the caller decides whether that stops the run or is skipped). A file that cannot be read
at all (missing, another format, a damaged Parquet file) raises ``ValueError`` naming it.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class RawRow:
    """One row: ``value`` (usually a dict of columns) or, for an unreadable row, ``error``."""

    location: str
    value: Any = None
    error: str = ""


def _jsonl(path: str) -> Iterator[RawRow]:
    with open(path, "rb") as f:
        for number, raw in enumerate(f, start=1):
            location = f"{path} line {number}"
            try:
                line = raw.decode("utf-8-sig" if number == 1 else "utf-8")
            except UnicodeDecodeError as exc:
                yield RawRow(location, error=f"not UTF-8 text (byte {raw[exc.start]:#04x} at column {exc.start + 1})")
                continue
            if not line.strip():
                continue
            try:
                yield RawRow(location, json.loads(line))
            except json.JSONDecodeError as exc:
                yield RawRow(location, error=f"invalid JSON ({exc})")


def _parquet(path: str) -> Iterator[RawRow]:
    import pyarrow
    import pyarrow.parquet as pq

    try:
        rows = pq.read_table(path).to_pylist()
    except (pyarrow.ArrowException, OSError) as exc:
        raise ValueError(f"data=files: {path} cannot be read as Parquet ({exc})") from None
    for number, row in enumerate(rows, start=1):
        yield RawRow(f"{path} row {number}", row)


def _hf_disk(path: str, hf_split: str) -> Iterator[RawRow]:
    from datasets import DatasetDict, load_from_disk

    dataset = load_from_disk(path)
    if isinstance(dataset, DatasetDict):
        if hf_split not in dataset:
            raise ValueError(f"data=files: {path} is a DatasetDict with splits {sorted(dataset)}, not {hf_split!r}")
        dataset = dataset[hf_split]
    for number, row in enumerate(dataset, start=1):
        yield RawRow(f"{path} row {number}", row)


def check_path(path: str, key: str) -> None:
    """ValueError naming ``key`` unless ``path`` is a directory (a saved dataset) or a regular ``.jsonl`` or
    ``.parquet`` file: a FIFO, socket or device would block the run or never end. Reads nothing."""
    if not os.path.exists(path):
        raise ValueError(f"data=files: {key}: no such file or directory {path!r}")
    if os.path.isdir(path):
        return
    if not os.path.isfile(path):
        raise ValueError(f"data=files: {key}: {path!r} is not a regular file (a FIFO, socket or device); "
                         "copy the data into a .jsonl or .parquet file")
    if not path.endswith((".jsonl", ".parquet")):
        raise ValueError(f"data=files: {key}: {path!r} is not a .jsonl or .parquet file nor a directory saved by "
                         "datasets.save_to_disk")


def read_rows(path: str, hf_split: str, key: str) -> Iterator[RawRow]:
    """Every row of the file or saved dataset at ``path`` (see the module doc), :func:`check_path` first."""
    check_path(path, key)
    if os.path.isdir(path):
        return _hf_disk(path, hf_split)
    return _jsonl(path) if path.endswith(".jsonl") else _parquet(path)
