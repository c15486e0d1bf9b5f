"""Helpers for the tests of rlloom plugins, ours and third parties'.

- :func:`train_tiny` runs ``preset=tiny`` in this process and returns its logged metric rows;
- :func:`metric_rows` reads a run's ``metrics.jsonl``; :func:`training_rows` keeps its training steps;
  :func:`dumped_rollouts` reads one step's ``trainer.dump_rollouts`` file;
  :func:`comparable_rows` drops what differs between two runs of one seed (timings, memory);
- :func:`entry_point_registry` loads one installed plugin on its own and fails the test, with the
  plugin's traceback, if it does not load;
- :func:`device_params` parametrizes a test over ``cpu`` and ``cuda``, the CUDA case marked ``cuda``
  (skipped with its reason on a machine without a GPU);
- :func:`mounted_tmpfs` mounts a small real disk for a test that fills one.

Importing this module is as cheap as importing :mod:`rlloom`: it imports nothing heavier.
"""

from __future__ import annotations

import contextlib
import importlib.metadata
import json
import os
import signal
import subprocess
from collections.abc import Iterator

from rlloom.plugins.registry import Registry

import rlloom_trainer
from rlloom_trainer.checkpoint import RESUME_MARKER

__all__ = ["MEASURED_PREFIXES", "RESUME_MARKER", "comparable_rows", "device_params", "dumped_rollouts",
           "entry_point_registry", "metric_rows", "mounted_tmpfs", "train_tiny", "training_rows"]


def device_params(what: str) -> list:
    """``["cpu", pytest.param("cuda", marks=pytest.mark.cuda(what))]`` for ``@pytest.mark.parametrize``
    and parametrized fixtures; ``what`` says what the CUDA case checks (the skip reason without a GPU:
    :mod:`rlloom_trainer.pytest_plugin`)."""
    import pytest

    return ["cpu", pytest.param("cuda", marks=pytest.mark.cuda(what))]


@contextlib.contextmanager
def mounted_tmpfs(folder: str | os.PathLike[str], size: str) -> Iterator[str]:
    """A tmpfs of ``size`` (``mount -o size=``: ``12k``, ``1m``) mounted on the new folder ``folder``
    while the block runs, then unmounted: a real disk that fills up. Mounting needs root (as on this
    project's machines); elsewhere the test is skipped with mount's message."""
    import pytest

    os.makedirs(folder)
    mounted = subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", os.fspath(folder)],
                             capture_output=True)
    if mounted.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here (needs root): {mounted.stderr.decode().strip()}")
    try:
        yield os.fspath(folder)
    finally:
        subprocess.run(["umount", os.fspath(folder)], check=True)


def default_sigint() -> None:
    """``preexec_fn`` of a process a test stops with SIGINT: Ctrl-C at a terminal reaches a foreground command,
    but a test session started as a background job of a script inherits SIGINT ignored, and Python (like
    rlloom) leaves an ignored SIGINT alone, so the process would never see the signal."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)


@contextlib.contextmanager
def python_sigint() -> Iterator[None]:
    """In this process, SIGINT raises KeyboardInterrupt (Python's own handler) for the block, whatever this
    process inherited (see :func:`default_sigint`); the handler from before is put back after."""
    before = signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, before)


def metric_rows(run_dir: str | os.PathLike[str]) -> list[dict]:
    """The rows of ``<run_dir>/metrics.jsonl``, in file order, one dict per line.

    Every line must be a whole JSON row: a torn line raises ``ValueError`` naming the file and the
    line number (unlike ``rlloom plot``, which skips it, a test should not pass over it).
    """
    path = os.path.join(run_dir, "metrics.jsonl")
    rows = []
    with open(path, encoding="utf-8") as handle:
        for number, line in enumerate(handle, start=1):
            try:
                rows.append(json.loads(line))
            except ValueError as error:
                raise ValueError(f"{path} line {number} is not a JSON row ({error}): {line!r}") from None
    return rows


def dumped_rollouts(run_dir: str | os.PathLike[str], step: int) -> list[dict]:
    """The samples ``trainer.dump_rollouts`` wrote for ``step`` (``<run_dir>/rollouts/step_<step>.jsonl``), one
    dict each, in file order."""
    with open(os.path.join(run_dir, "rollouts", f"step_{step}.jsonl"), encoding="utf-8") as handle:
        return [json.loads(line) for line in handle]


MEASURED_PREFIXES = ("timing_s/", "perf/", "training/wall_clock_s")
"""Metric keys that measure time, memory or throughput: they differ between two runs of one seed."""


def comparable_rows(rows: list[dict]) -> list[dict]:
    """Each row without the :data:`MEASURED_PREFIXES` keys and the :data:`RESUME_MARKER`: what two
    runs of one seed — one of them perhaps interrupted and resumed — must agree on."""
    return [{key: value for key, value in row.items() if not key.startswith(MEASURED_PREFIXES) and key != RESUME_MARKER}
            for row in rows]


def training_rows(rows: list[dict], key: str = "critic/score/mean") -> list[dict]:
    """The rows of training steps (``step > 0``; step 0 is the validation before training) that
    report ``key``, in order. A null value (a non-finite metric) counts as reported."""
    return [row for row in rows if row["step"] > 0 and key in row]


def train_tiny(run_dir: str | os.PathLike[str], *overrides: str, cache_dir: str | os.PathLike[str] | None = None
               ) -> list[dict]:
    """Run ``rlloom_trainer.train(["preset=tiny", "trainer.run_dir=<run_dir>", "model.cache_dir=<cache_dir>",
    *overrides])`` in this process (the cache override only when ``cache_dir`` is given) and return
    :func:`metric_rows` of ``run_dir``.

    ``overrides`` must not set ``trainer.run_dir``: the rows are read from ``run_dir``.
    """
    cache = [f"model.cache_dir={cache_dir}"] if cache_dir is not None else []
    rlloom_trainer.train(["preset=tiny", f"trainer.run_dir={run_dir}", *cache, *overrides])
    return metric_rows(run_dir)


def entry_point_registry(name: str) -> Registry:
    """A :class:`~rlloom.plugins.registry.Registry` of entry point ``name`` (group ``rlloom``) alone.

    Raises ``AssertionError`` naming the entry point if no installed distribution provides it, if
    more than one does, or if it failed to load or register (the message then holds the plugin's
    traceback). An editable install seen twice on ``sys.path`` counts once.
    """
    found = importlib.metadata.entry_points(group="rlloom", name=name)
    by_distribution = {ep.dist.name if ep.dist else "?": ep for ep in found}
    if len(by_distribution) != 1:
        providers = ", ".join(sorted(by_distribution)) or "none"
        raise AssertionError(f"entry point {name!r} in group 'rlloom': expected one installed distribution "
                             f"providing it, found {providers}")
    registry = Registry(list(by_distribution.values()))
    (status,) = registry.statuses
    if status.status != "loaded":
        raise AssertionError(f"entry point {name!r} of {status.distribution} failed to load: {status.error}\n"
                             f"{status.traceback}")
    return registry
