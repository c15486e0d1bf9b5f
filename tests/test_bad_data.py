"""Bad ``data=files`` inputs through the CLI: each kind is one paragraph with exit status 2 naming the
file (and the line or row), or, with ``data.skip_invalid=true``, skipped and counted; a byte-order
mark is accepted."""

from __future__ import annotations

import json
import os

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from rlloom.cli import main
from rlloom_tasks.data.files import FilesDataConfig, build_files

GOOD = [{"prompt": f"What is {i}+1?", "ground_truth": str(i + 1)} for i in range(12)]


def jsonl(rows) -> bytes:
    return b"".join(json.dumps(row).encode() + b"\n" for row in rows)


def parquet(path, rows) -> None:
    pq.write_table(pa.Table.from_pylist(rows), path)


def write(tmp_path, kind: str):
    """The bad file of ``kind`` and the text its error must contain."""
    path = tmp_path / ("train.parquet" if "parquet" in kind else "train.csv" if kind == "csv" else "train.jsonl")
    if kind == "malformed line":
        path.write_bytes(jsonl(GOOD[:3]) + b"{not json\n" + jsonl(GOOD[3:]))
        return path, "line 4: invalid JSON"
    if kind == "empty file":
        path.write_bytes(b"")
        return path, "0 training and 0 validation prompts"
    if kind == "wrong columns":
        path.write_bytes(jsonl([{"question": r["prompt"], "answer": r["ground_truth"]} for r in GOOD]))
        return path, "line 1"
    if kind == "nulls in parquet":
        parquet(path, GOOD[:5] + [{"prompt": None, "ground_truth": "1"}] + GOOD[5:])
        return path, "row 6"
    if kind == "torn last line":
        path.write_bytes(jsonl(GOOD) + b'{"prompt": "What is')
        return path, f"line {len(GOOD) + 1}: invalid JSON"
    if kind == "arrays as rows":
        path.write_bytes(jsonl([[r["prompt"], r["ground_truth"]] for r in GOOD]))
        return path, "line 1"
    if kind == "truncated parquet":
        parquet(path, GOOD)
        path.write_bytes(path.read_bytes()[:-40])
        return path, "cannot be read as Parquet"
    if kind == "non-UTF-8 line":
        path.write_bytes(jsonl(GOOD[:2]) + '{"prompt": "caf\u00e9?", "ground_truth": "1"}\n'.encode("latin-1") + jsonl(GOOD[2:]))
        return path, "line 3: not UTF-8 text"
    if kind == "csv":
        path.write_text("prompt,ground_truth\nWhat is 1+1?,2\n")
        return path, "is not a .jsonl or .parquet file"
    if kind == "fifo":  # reading it blocked the run with no output
        os.mkfifo(path)
        return path, "data.train_files: " + repr(str(path)) + " is not a regular file"
    if kind == "missing file":
        return tmp_path / "nowhere.jsonl", "no such file or directory"
    raise AssertionError(kind)


KINDS = ["malformed line", "empty file", "wrong columns", "nulls in parquet", "torn last line", "arrays as rows",
         "truncated parquet", "non-UTF-8 line", "csv", "missing file", "fifo"]


@pytest.mark.parametrize("kind", KINDS)
def test_a_bad_file_is_one_paragraph_naming_it(kind, tmp_path, capsys):
    path, named = write(tmp_path, kind)
    cache = tmp_path / "models"
    status = main(["train", "preset=tiny", "data=files", f"data.train_files=[{path}]", "data.val_fraction=0.25",
                   f"model.cache_dir={cache}", f"trainer.run_dir={tmp_path / 'run'}"])
    err = capsys.readouterr().err
    assert status == 2, err
    assert str(path) in err and named in err and "Traceback" not in err, err
    assert not cache.exists() or not any(cache.iterdir()), "a model was built before the data error"


@pytest.mark.parametrize("kind", ["wrong columns", "arrays as rows"])
def test_a_bad_first_row_of_a_jsonl_file_is_refused_before_the_run_folder_is_made(kind, tmp_path, capsys):
    path, named = write(tmp_path, kind)
    status = main(["train", "preset=tiny", "data=files", f"data.train_files=[{path}]", "data.val_fraction=0.25",
                   f"model.cache_dir={tmp_path / 'models'}", f"trainer.run_dir={tmp_path / 'run'}"])
    err = capsys.readouterr().err
    assert status == 2 and named in err and "set data.skip_invalid=true" in err, err
    assert sorted(p.name for p in tmp_path.iterdir()) == [path.name], "something was left beside the data file"


@pytest.mark.parametrize("kind", ["malformed line", "nulls in parquet", "torn last line", "non-UTF-8 line"])
def test_bad_rows_are_skipped_and_counted(kind, tmp_path):
    path, _ = write(tmp_path, kind)
    data = build_files(FilesDataConfig(train_files=[str(path)], val_fraction=0.25, skip_invalid=True), seed=0)
    assert data.num_invalid == 1 and len(data.train) + len(data.val) == len(GOOD)


def test_a_byte_order_mark_is_accepted(tmp_path):
    path = tmp_path / "bom.jsonl"
    path.write_bytes(b"\xef\xbb\xbf" + jsonl(GOOD))
    data = build_files(FilesDataConfig(train_files=[str(path)], val_fraction=0.25), seed=0)
    assert len(data.train) + len(data.val) == len(GOOD) and data.num_invalid == 0


def test_every_prompt_too_long_names_the_settings(tmp_path, capsys):
    path = tmp_path / "long.jsonl"
    path.write_bytes(jsonl([{"prompt": "x " * 400, "ground_truth": "1"} for _ in range(8)]))
    status = main(["train", "preset=tiny", "data=files", f"data.train_files=[{path}]", "data.val_fraction=0.25",
                   f"model.cache_dir={tmp_path / 'models'}", f"trainer.run_dir={tmp_path / 'run'}"])
    err = capsys.readouterr().err
    assert status == 2 and "trainer.max_prompt_length" in err and "0 of the dataset's 6 training prompts" in err, err
