"""A run's recorded config holds local paths as absolute paths, so that ``rlloom eval <run>`` or
``rlloom train --config <run>/config.yaml`` from another folder reads the same files; hub ids, module names
and keywords stay as typed."""

from __future__ import annotations

import os

import yaml
from rlloom.cli import main
from rlloom_trainer.record import absolute, absolute_paths


def printed_config(capsys, *args: str) -> dict:
    assert main(["train", "--print-config", *args]) == 0
    return yaml.safe_load(capsys.readouterr().out)


def test_relative_paths_are_recorded_absolute_and_read_from_another_folder(tmp_path, monkeypatch, capsys):
    work, elsewhere = tmp_path / "work", tmp_path / "elsewhere"
    (work / "models").mkdir(parents=True)
    elsewhere.mkdir()
    (work / "rows.jsonl").write_text('{"prompt": "1+1=", "ground_truth": "2"}\n')
    (work / "my_reward.py").write_text("def score(completion, **kwargs):\n    return 0.0\n")
    monkeypatch.chdir(work)
    record = printed_config(capsys, "preset=tiny", "data=files", "data.train_files=[rows.jsonl]", "reward=python",
                            "reward.function=my_reward.py:score", "model.cache_dir=models", "trainer.resume=never")
    assert record["data"]["train_files"] == [str(work / "rows.jsonl")]
    assert record["reward"]["function"] == f"{work / 'my_reward.py'}:score"
    assert record["model"]["cache_dir"] == str(work / "models")
    assert record["trainer"]["resume"] == "never"
    (work / "config.yaml").write_text(yaml.safe_dump(record, sort_keys=False))

    monkeypatch.chdir(elsewhere)  # the data file's first row is read at compose: it must be found from here
    again = printed_config(capsys, "--config", str(work / "config.yaml"))
    assert {section: again[section] for section in ("data", "reward", "model")} == \
        {section: record[section] for section in ("data", "reward", "model")}


def test_only_existing_local_paths_under_path_keys_change(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "auto").mkdir()  # a folder named like trainer.resume's keyword
    (tmp_path / "HuggingFaceTB").mkdir()
    (tmp_path / "runs").mkdir()
    section = {"path": "HuggingFaceTB/SmolLM2-135M", "resume": "auto", "experiment": "runs",
               "weights_dir": "runs", "function": "package.module:score", "nested": {"val_files": ["runs", 3]}}
    assert absolute_paths(section) == {
        "path": "HuggingFaceTB/SmolLM2-135M",  # no such folder here: a hub id
        "resume": "auto", "experiment": "runs",  # a keyword; a key that holds no path
        "weights_dir": os.path.join(tmp_path, "runs"), "function": "package.module:score",
        "nested": {"val_files": [os.path.join(tmp_path, "runs"), 3]},
    }
    assert absolute("/abs/x") == "/abs/x"
