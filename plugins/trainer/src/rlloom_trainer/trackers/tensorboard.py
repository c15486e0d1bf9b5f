"""``tensorboard`` tracker: scalar event files in ``<run_dir>/tensorboard``."""

from __future__ import annotations

import os

from rlloom_trainer.trackers.common import finite_scalars, library


class TensorBoardTracker:
    """One scalar per metric and step. :meth:`rewind` makes TensorBoard discard what an interrupted
    process logged after the resumed step (the writer's ``purge_step``)."""

    def __init__(self, run_dir: str, config: dict) -> None:
        self.log_dir = os.path.join(run_dir, "tensorboard")
        self._writer = None

    def _open(self, purge_step: int | None) -> None:
        tensorboard = library("tensorboard", "torch.utils.tensorboard")
        self._writer = tensorboard.SummaryWriter(self.log_dir, purge_step=purge_step)

    def rewind(self, step: int) -> None:
        """Events of steps after ``step`` in earlier event files are ignored from now on (call before
        the first :meth:`log`)."""
        if self._writer is None:
            self._open(step + 1)

    def log(self, metrics: dict[str, float], step: int) -> None:
        if self._writer is None:
            self._open(None)
        for key, value in finite_scalars(metrics).items():
            self._writer.add_scalar(key, value, global_step=step)
        self._writer.flush()

    def close(self) -> None:
        if self._writer is not None:
            self._writer.close()
