"""The trackers all come from rlloom-trainer; tensorboard, wandb and mlflow write what each tool's own reader
reads back, and without its library a tracker names the extra to install."""

from __future__ import annotations

import glob
import math
import os
import subprocess
import sys

import pytest

from rlloom.plugins.registry import get_registry


@pytest.fixture(autouse=True)
def _allow_mlflow_file_store(monkeypatch):
    """MLflow 3 refuses the file store without this (the tracker sets it for a run's process)."""
    monkeypatch.setenv("MLFLOW_ALLOW_FILE_STORE", "true")


def test_every_tracker_comes_from_the_trainer():
    trackers = get_registry().components["tracker"]
    names = ("console", "jsonl", "tensorboard", "wandb", "mlflow")
    assert {name: trackers[name].distribution for name in names} == dict.fromkeys(names, "rlloom-trainer")


WITHOUT_LIBRARIES = """
import sys
for library in ("tensorboard", "wandb", "mlflow"):
    sys.modules[library] = None  # importing it now raises ImportError, as when it is not installed
from rlloom.plugins.registry import get_registry

for name in ("tensorboard", "wandb", "mlflow"):
    try:
        get_registry().components["tracker"][name].factory(sys.argv[1], {}).log({"loss": 1.0}, 1)
    except ImportError as error:
        print(error)
"""


def test_a_tracker_without_its_library_names_the_extra(tmp_path):
    """In a fresh interpreter: a library half-imported here would break the other tests' imports of it."""
    result = subprocess.run([sys.executable, "-c", WITHOUT_LIBRARIES, str(tmp_path)], capture_output=True, text=True,
                            timeout=120)
    assert result.returncode == 0, result.stderr[-3000:]
    lines = result.stdout.splitlines()
    assert len(lines) == 3
    libraries = {"tensorboard": "'tensorboard>=2.14'", "wandb": "'wandb>=0.17'", "mlflow": "'mlflow-skinny>=2.10'"}
    for name, line in zip(("tensorboard", "wandb", "mlflow"), lines):  # the extras' libraries (pyproject.toml)
        assert line.startswith(f"trainer.trackers=[{name}] cannot start (")
        assert line.endswith(f"): pip install {libraries[name]}")


def test_tensorboard_rewind_discards_the_steps_of_an_interrupted_process(tmp_path):
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    from rlloom_trainer.trackers.tensorboard import TensorBoardTracker

    first = TensorBoardTracker(str(tmp_path), {})
    for step in (1, 2, 3):
        first.log({"loss": float(step), "bad": math.nan, "name": "skipped"}, step)
    first.close()
    resumed = TensorBoardTracker(str(tmp_path), {})
    resumed.rewind(2)  # resumed from the checkpoint of step 2: the old step 3 is dropped
    for step in (3, 4):
        resumed.log({"loss": 10.0 * step}, step)
    resumed.close()
    events = EventAccumulator(str(tmp_path / "tensorboard"))
    events.Reload()
    assert events.Tags()["scalars"] == ["loss"]
    assert [(e.step, e.value) for e in events.Scalars("loss")] == [(1, 1.0), (2, 2.0), (3, 30.0), (4, 40.0)]


def test_mlflow_store_holds_metrics_and_params(tmp_path):
    from mlflow.tracking import MlflowClient

    from rlloom_trainer.trackers.mlflow import EXPERIMENT, MlflowTracker, mlflow_name, store_uri

    assert mlflow_name("val-core/gsm8k/acc/mean@4") == "val-core/gsm8k/acc/mean_at_4"
    assert mlflow_name("a#b c:d") == "a_b c:d"
    tracker = MlflowTracker(str(tmp_path), {"trainer": {"total_steps": 3}, "algorithm": {"n": 8}})
    for step in (0, 1, 2):
        tracker.log({"critic/score/mean": 0.5 * step, "val-core/x/acc/mean@2": 0.25, "skip": math.inf}, step)
    tracker.close()
    client = MlflowClient(tracking_uri=store_uri(str(tmp_path)))
    (found,) = client.search_runs([client.get_experiment_by_name(EXPERIMENT).experiment_id])
    assert found.info.status == "FINISHED"
    assert found.data.params == {"trainer.total_steps": "3", "algorithm.n": "8"}
    history = client.get_metric_history(found.info.run_id, "critic/score/mean")
    assert sorted((m.step, m.value) for m in history) == [(0, 0.0), (1, 0.5), (2, 1.0)]
    assert len(client.get_metric_history(found.info.run_id, "val-core/x/acc/mean_at_2")) == 3
    assert client.get_metric_history(found.info.run_id, "skip") == []


WANDB_RUN = """
import sys
from rlloom_trainer.trackers.wandb import WandbTracker

tracker = WandbTracker(sys.argv[1], {"trainer": {"total_steps": 2}})
for step in (1, 2):
    tracker.log({"critic/score/mean": 0.125 * step, "actor/entropy": 3.0}, step)
tracker.close()
"""


def test_wandb_offline_run_is_written_without_network(tmp_path):
    """In a fresh interpreter, as in a run (wandb keeps per-process service state)."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("WANDB_")}
    env.update(WANDB_DISABLE_GIT="true", HTTPS_PROXY="http://127.0.0.1:9", HTTP_PROXY="http://127.0.0.1:9")
    result = subprocess.run([sys.executable, "-c", WANDB_RUN, str(tmp_path)], env=env, capture_output=True,
                            text=True, timeout=120)
    assert result.returncode == 0, result.stderr[-3000:]
    (record,) = glob.glob(str(tmp_path / "wandb" / "offline-run-*" / "run-*.wandb"))
    data = open(record, "rb").read()
    assert len(data) > 1000
    # The records are protobuf: metric names and the config appear as plain bytes.
    assert b"critic/score/mean" in data and b"actor/entropy" in data and b"total_steps" in data


def test_metrics_jsonl_is_written_whatever_the_tracker_list_says(tmp_path):
    from rlloom_trainer.testing import train_tiny

    rows = train_tiny(tmp_path / "run", "trainer.trackers=[console]", "trainer.total_steps=1",
                      "trainer.val_before_train=false", cache_dir=tmp_path / "cache")
    assert [row["step"] for row in rows if "reward/errors" in row] == [1]
