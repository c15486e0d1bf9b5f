"""Where a run's resident memory goes: ``rlloom train`` in this process, its resident set (RSS, ``/proc/self/statm``)
read every 5 ms by a thread, each reading labelled with what the run was doing.

Labels: ``build`` until the first step starts (imports, engines built, weights loaded), then the step's stages as
``StepContext`` times them (``gen``, ``reward``, ``old_log_prob``, ``ref``, ``update_actor``, ``update_weights``, …),
with ``step`` for the rest of a step and ``after`` once the steps are done. Reported: the highest reading under each label
(GB), the label of the highest of all, the reading when the first step started (``built_gb``: what the process
holds before any step) and ``ru_maxrss`` (the kernel's peak, which a 5 ms reading can miss by a little).

    python bench/memory_stages.py --out stages.json trainer.total_steps=2 rollout=vllm   # extra args: overrides

``bench/bench_lora.py`` runs each of its variants through this script.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import threading
import time

PAGE = os.sysconf("SC_PAGE_SIZE")


def rss_gb() -> float:
    """This process's resident set now, in GB."""
    with open("/proc/self/statm", encoding="ascii") as handle:
        return int(handle.read().split()[1]) * PAGE / 1e9


class StageSampler:
    """Reads the RSS every ``period`` seconds in a thread, keeping the highest reading per label."""

    def __init__(self, period: float = 0.005) -> None:
        self.label, self.period = "build", period
        self.peaks: dict[str, float] = {}
        self.built_gb: float | None = None
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._sample, name="rss-sampler", daemon=True)

    def _sample(self) -> None:
        while not self._stop.is_set():
            label, value = self.label, rss_gb()
            self.peaks[label] = max(self.peaks.get(label, 0.0), value)
            time.sleep(self.period)

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        self._thread.join()

    def enter(self, label: str) -> str:
        """Label the readings from now on ``label``; returns the label it replaces."""
        if self.built_gb is None and label != "build":
            self.built_gb = rss_gb()
        previous, self.label = self.label, label
        return previous


def label_stages(sampler: StageSampler) -> None:
    """Make ``StepContext``'s timed stages (``timed``, and ``_run``, which calls an engine also inside a
    ``concurrently()`` block, where no ``timed`` runs) and ``Trainer.fit``'s steps set the sampler's label."""
    import contextlib
    import functools

    from rlloom.controller.step import StepContext
    from rlloom_trainer.trainer import Trainer

    timed, run, context = StepContext.timed, StepContext._run, Trainer.context

    @contextlib.contextmanager
    def labelled(stage: str):
        previous = sampler.enter(stage)
        try:
            yield
        finally:
            sampler.enter(previous)

    @contextlib.contextmanager
    def labelled_timed(ctx, stage: str):
        with labelled(stage), timed(ctx, stage):
            yield

    @functools.wraps(run)
    def labelled_run(ctx, stage: str, *args, **kwargs):
        with labelled(stage):
            return run(ctx, stage, *args, **kwargs)

    def step_context(trainer, training: bool = False):
        if training:
            sampler.enter("step")
        return context(trainer, training=training)

    StepContext.timed, StepContext._run, Trainer.context = labelled_timed, labelled_run, step_context


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", required=True, help="write the readings here (JSON)")
    args, overrides = parser.parse_known_args()
    sampler = StageSampler()
    sampler.start()
    label_stages(sampler)
    from rlloom.cli import main as rlloom_main

    status = rlloom_main(["train", *overrides])
    sampler.enter("after")
    sampler.stop()
    peaks = {label: round(value, 3) for label, value in sampler.peaks.items()}
    report = {"status": status, "ru_maxrss_gb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024 / 1e9,
              "built_gb": sampler.built_gb, "peak_stage": max(peaks, key=peaks.get), "stage_peak_gb": peaks}
    with open(args.out, "w", encoding="utf-8") as handle:
        json.dump(report, handle, indent=2)
    raise SystemExit(status)


if __name__ == "__main__":
    main()
