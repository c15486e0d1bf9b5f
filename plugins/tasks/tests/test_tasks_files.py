"""``data=files``: prompts from JSONL, Parquet and saved Hugging Face datasets; splits; malformed rows."""

from __future__ import annotations

import json
import random

import pytest
from rlloom.data import PromptRecord
from rlloom_tasks.data.files import FilesDataConfig, StringPrompts, build_files

ROWS = [
    {"question": "What is 2+2?", "answer": "4", "source": "math", "level": 1},
    {"question": [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Capital of France?"}],
     "answer": "Paris", "source": "geo", "level": 2},
    {"question": "Name a prime.", "answer": 7, "source": "math", "level": 3},
]
COLUMNS = {"prompt_column": "question", "ground_truth_column": "answer", "data_source_column": "source",
           "extra_columns": ["level"]}
EXPECTED = [
    PromptRecord([{"role": "user", "content": "What is 2+2?"}], "4", "math", {"level": 1}),
    PromptRecord([{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Capital of France?"}],
                 "Paris", "geo", {"level": 2}),
    PromptRecord([{"role": "user", "content": "Name a prime."}], 7, "math", {"level": 3}),
]


def write_jsonl(path, rows: list) -> str:
    path.write_text("".join((row if isinstance(row, str) else json.dumps(row)) + "\n" for row in rows))
    return str(path)


def test_jsonl_with_column_mapping(tmp_path):
    train = write_jsonl(tmp_path / "train.jsonl", ROWS)
    val = write_jsonl(tmp_path / "val.jsonl", ROWS[:1])
    data = build_files(FilesDataConfig(train_files=[train], val_files=[val], **COLUMNS), seed=0)
    assert data.train == EXPECTED and data.val == EXPECTED[:1] and data.num_invalid == 0


def test_raw_string_prompts_and_defaults(tmp_path):
    train = write_jsonl(tmp_path / "t.jsonl", [{"prompt": "Q: hi\nA:", "ground_truth": "x"}] * 2)
    data = build_files(FilesDataConfig(train_files=[train], val_files=[train], string_prompts=StringPrompts.raw), 0)
    assert data.train[0] == PromptRecord("Q: hi\nA:", "x", "files", {})


def test_parquet_with_chat_messages(tmp_path):
    import pyarrow as pa
    import pyarrow.parquet as pq

    path = str(tmp_path / "train.parquet")
    rows = [{"messages": record.prompt, "answer": str(record.ground_truth)} for record in EXPECTED]
    pq.write_table(pa.Table.from_pylist(rows), path)
    data = build_files(FilesDataConfig(train_files=[path], val_files=[path], prompt_column="messages",
                                       ground_truth_column="answer"), seed=0)
    assert [r.prompt for r in data.train] == [r.prompt for r in EXPECTED]
    assert [r.ground_truth for r in data.train] == ["4", "Paris", "7"]


def test_saved_hf_dataset_and_dataset_dict(tmp_path):
    from datasets import Dataset, DatasetDict

    rows = [{"question": f"Question {i}?", "answer": str(i)} for i in range(5)]
    Dataset.from_list(rows).save_to_disk(str(tmp_path / "plain"))
    DatasetDict({"train": Dataset.from_list(rows[:3]), "test": Dataset.from_list(rows[3:])}).save_to_disk(
        str(tmp_path / "dict"))
    columns = {"prompt_column": "question", "ground_truth_column": "answer"}
    plain = build_files(FilesDataConfig(train_files=[str(tmp_path / "plain")], val_fraction=0.4, **columns), 0)
    assert len(plain.train) + len(plain.val) == 5 and len(plain.val) == 2
    split = build_files(FilesDataConfig(train_files=[str(tmp_path / "dict")], val_files=[str(tmp_path / "dict")],
                                        **columns), 0)
    assert [r.ground_truth for r in split.train] == ["0", "1", "2"]
    assert [r.ground_truth for r in split.val] == ["3", "4"]
    with pytest.raises(ValueError, match=r"splits \['test', 'train'\], not 'validation'"):
        build_files(FilesDataConfig(train_files=[str(tmp_path / "dict")], val_fraction=0.5, hf_train_split="validation",
                                    **columns), 0)


def test_val_fraction_is_a_seeded_split_keeping_file_order(tmp_path):
    rows = [{"prompt": f"p{i}", "ground_truth": i} for i in range(20)]
    path = write_jsonl(tmp_path / "t.jsonl", rows)
    data = build_files(FilesDataConfig(train_files=[path], val_fraction=0.25), seed=5)
    order = list(range(20))
    random.Random(5).shuffle(order)
    assert [r.ground_truth for r in data.val] == sorted(order[:5])
    assert [r.ground_truth for r in data.train] == sorted(order[5:])
    other = build_files(FilesDataConfig(train_files=[path], val_fraction=0.25), seed=6)
    assert [r.ground_truth for r in other.val] != [r.ground_truth for r in data.val]


BAD_LINES = [
    ("not json {", "line 2: invalid JSON"),
    (json.dumps(["a", "list"]), "line 2: a row must be an object"),
    (json.dumps({"question": "q"}), r"line 2: missing column\(s\) \['answer'"),
    (json.dumps({"question": "", "answer": "1"}), "line 2: column 'question' is an empty string"),
    (json.dumps({"question": 5, "answer": "1"}), "line 2: column 'question' must be a non-empty string or list"),
    (json.dumps({"question": [{"role": "user"}], "answer": "1"}), "line 2: column 'question' message 0"),
    (json.dumps({"question": "q", "answer": None}), "line 2: column 'answer' is null"),
]


@pytest.mark.parametrize(("line", "message"), BAD_LINES)
def test_malformed_row_error_names_file_and_line(tmp_path, line, message):
    rows = [{"question": "ok?", "answer": "1"}, line, {"question": "b", "answer": "2"}]
    path = write_jsonl(tmp_path / "data.jsonl", rows)
    with pytest.raises(ValueError, match=f"data.jsonl {message}") as error:
        build_files(FilesDataConfig(train_files=[path], val_files=[path], prompt_column="question",
                                    ground_truth_column="answer"), 0)
    assert "data.skip_invalid=true" in str(error.value)


def test_skip_invalid_skips_and_counts(tmp_path):
    lines = [{"question": "ok?", "answer": "1"}] + [line for line, _ in BAD_LINES] + [{"question": "b", "answer": "2"}]
    path = write_jsonl(tmp_path / "data.jsonl", lines)
    cfg = FilesDataConfig(train_files=[path], val_fraction=0.5, prompt_column="question", ground_truth_column="answer",
                          skip_invalid=True)
    with pytest.warns(UserWarning, match="skipped 7 invalid row"):
        data = build_files(cfg, 0)
    assert data.num_invalid == len(BAD_LINES) and len(data.invalid) == len(BAD_LINES)
    assert sorted(r.ground_truth for r in data.train + data.val) == ["1", "2"]
    assert data.invalid[0].endswith("data.jsonl line 2: invalid JSON (Expecting value: line 1 column 1 (char 0))")


@pytest.mark.parametrize(("options", "message"), [
    ({}, "data.train_files"),
    ({"train_files": ["x.jsonl"], "val_fraction": 0.0}, "data.val_files"),
    ({"train_files": ["x.jsonl"], "val_fraction": 1.0}, "data.val_fraction"),
    ({"train_files": [1]}, "data.train_files must be a path or a list of paths"),
    ({"train_files": "x.jsonl", "val_files": {"a": 1}}, "data.val_files must be a path or a list of paths"),
])
def test_config_errors(options, message):
    with pytest.raises(ValueError, match=message):
        build_files(FilesDataConfig(**options), 0)


def test_unsupported_or_missing_files(tmp_path):
    (tmp_path / "data.csv").write_text("a,b\n")
    with pytest.raises(ValueError, match="not a .jsonl or .parquet file"):
        build_files(FilesDataConfig(train_files=[str(tmp_path / "data.csv")], val_fraction=0.5), 0)
    with pytest.raises(ValueError, match="no such file"):
        build_files(FilesDataConfig(train_files=[str(tmp_path / "nope.jsonl")], val_fraction=0.5), 0)


def test_one_path_is_a_list_of_one_and_the_default_holds_out_a_tenth_and_says_so(tmp_path, capsys):
    path = tmp_path / "data.jsonl"
    path.write_text("".join(json.dumps({"prompt": f"q{i}", "ground_truth": i}) + "\n" for i in range(20)))
    cfg = FilesDataConfig(train_files=str(path))
    assert cfg.train_files == [str(path)]
    data = build_files(cfg, seed=0)
    assert (len(data.train), len(data.val)) == (18, 2)
    assert "2 of the 20 training rows held out for validation (data.val_fraction=0.1" in capsys.readouterr().err
