"""``mlflow`` tracker: an MLflow run in the local file store ``<run_dir>/mlruns`` (no server).

Browse it with ``mlflow ui --backend-store-uri <run_dir>/mlruns``. MLflow 3 refuses the file store
unless ``MLFLOW_ALLOW_FILE_STORE=true``; the tracker sets it for its process when it is unset.
MLflow names allow only letters, digits and ``_ - . / : space``: ``@`` becomes ``_at_``
(``val-core/digits/acc/mean@4`` → ``val-core/digits/acc/mean_at_4``), any other character ``_``.
"""

from __future__ import annotations

import os
import re
import time

from rlloom_trainer.run_state import flatten_config
from rlloom_trainer.trackers.common import finite_scalars, library, run_name

EXPERIMENT = "rlloom"


def mlflow_name(name: str) -> str:
    """``name`` with the characters MLflow rejects replaced (see the module doc)."""
    return re.sub(r"[^/\w.\- :]", "_", name.replace("@", "_at_"))


def store_uri(run_dir: str) -> str:
    """The tracking URI of a run folder's local MLflow store."""
    return "file://" + os.path.abspath(os.path.join(run_dir, "mlruns"))


class MlflowTracker:
    """One MLflow run per process in experiment ``rlloom``; the trainer config's sections are logged
    as flattened params (``trainer.total_steps`` …)."""

    def __init__(self, run_dir: str, config: dict) -> None:
        os.environ.setdefault("MLFLOW_ALLOW_FILE_STORE", "true")
        self._entities = library("mlflow", "mlflow.entities")
        self._client = library("mlflow", "mlflow.tracking").MlflowClient(tracking_uri=store_uri(run_dir))
        experiment = self._client.get_experiment_by_name(EXPERIMENT)
        experiment_id = experiment.experiment_id if experiment else self._client.create_experiment(EXPERIMENT)
        self._run_id = self._client.create_run(experiment_id, run_name=run_name(run_dir)).info.run_id
        flat = flatten_config(config)
        params = [self._entities.Param(mlflow_name(key), str(value)[:500]) for key, value in flat.items()]
        for start in range(0, len(params), 100):
            self._client.log_batch(self._run_id, params=params[start : start + 100])

    def log(self, metrics: dict[str, float], step: int) -> None:
        now = int(time.time() * 1000)
        scalars = finite_scalars(metrics)
        batch = [self._entities.Metric(mlflow_name(key), value, now, step) for key, value in scalars.items()]
        self._client.log_batch(self._run_id, metrics=batch)

    def close(self) -> None:
        self._client.set_terminated(self._run_id)

