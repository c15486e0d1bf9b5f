"""Run checkpoints on disk: atomic writes, completeness checks, the ``latest`` pointer, retention.

Layout under ``<run_dir>/checkpoints/``::

    global_step_<N>/            one complete checkpoint (written as global_step_<N>.tmp, then renamed)
        actor/  critic/         what each train engine's ``save`` wrote
        trainer_state.pt        the run's state (rlloom_trainer.run_state.TrainerState)
        config.yaml             the resolved run config
        manifest.json           written LAST: {"step": N, "files": {relative path: size in bytes}}
    latest                      the name of the newest complete checkpoint (written last, atomically)

A checkpoint is *complete* when its ``manifest.json`` exists and every file it lists exists with the
listed size. A process killed at any point leaves either a complete checkpoint or a ``*.tmp``
folder (or a folder without a valid manifest), which is ignored when resuming and removed by the
next save.

Fault injection (tests): with ``RLLOOM_TEST_KILL_AT=<point>:<step>`` in the environment the process
sends itself SIGKILL at that point of the save of step ``<step>``. Points: ``during_save`` (the
checkpoint's files are written, its manifest is not), ``before_latest`` (the folder is renamed,
the ``latest`` pointer not yet updated).
"""

from __future__ import annotations

import errno
import json
import os
import re
import shutil
import signal
from collections.abc import Callable, Iterator
from dataclasses import dataclass

from rlloom.errors import RunFailedError

from rlloom_trainer import sigint

RESUME_MARKER = "training/resumed_from_step"
"""The metric the first row logged after a resume carries: the step the run resumed from."""

CHECKPOINTS_DIR = "checkpoints"
PREFIX = "global_step_"
MANIFEST = "manifest.json"
LATEST = "latest"
KILL_ENV = "RLLOOM_TEST_KILL_AT"
_NAME = re.compile(rf"^{PREFIX}(\d+)$")
DISK_FULL_ERRNOS = (errno.ENOSPC, errno.EDQUOT, errno.EFBIG)


def error_chain(error: BaseException) -> Iterator[BaseException]:
    """``error`` and every error behind it: its causes and contexts, and the per-rank ``failures``
    DCP's ``CheckpointException`` collects (``{rank: (exception, traceback)}``), each once."""
    pending, seen = [error], set()
    while pending:
        current = pending.pop()
        if current is None or id(current) in seen:
            continue
        seen.add(id(current))
        yield current
        pending += [current.__cause__, current.__context__]
        pending += [failure[0] for failure in getattr(current, "failures", {}).values()]


def disk_was_full(error: BaseException, folder: str) -> bool:
    """Whether a failed write into ``folder`` ran out of space: an ``OSError`` with ENOSPC (or
    EDQUOT, EFBIG) in the error's chain (:func:`error_chain`), a message saying so (safetensors
    reports "No space left on device (os error 28)"), or less than 1 MiB left on the filesystem
    (torch's zip writer reports a full disk as "unexpected pos")."""
    for current in error_chain(error):
        if isinstance(current, OSError) and current.errno in DISK_FULL_ERRNOS:
            return True
        if "No space left on device" in str(current):
            return True
    try:
        return shutil.disk_usage(folder).free < 2**20
    except OSError:
        return False


class CheckpointError(RunFailedError):
    """A checkpoint could not be written or read; the message names the folder and the cause."""


@dataclass(frozen=True)
class Checkpoint:
    """A complete checkpoint folder and the trainer step it was taken after."""

    path: str
    step: int


def fsync_path(path: str) -> None:
    """Flush a file's (or a folder's entries') data to disk."""
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def write_atomic(path: str, data: bytes) -> None:
    """Write ``data`` to ``path`` through ``path.tmp`` (fsync, rename, fsync of the folder): a reader
    sees the old content or the new one, never a part."""
    tmp = path + ".tmp"
    with open(tmp, "wb") as handle:
        handle.write(data)
        handle.flush()
        os.fsync(handle.fileno())
    os.replace(tmp, path)
    fsync_path(os.path.dirname(os.path.abspath(path)))


def _files(root: str) -> dict[str, int]:
    """Relative path → size of every file under ``root``."""
    sizes = {}
    for folder, _, names in os.walk(root):
        for name in names:
            full = os.path.join(folder, name)
            sizes[os.path.relpath(full, root)] = os.path.getsize(full)
    return sizes


def _kill_point(point: str, step: int) -> None:
    if os.environ.get(KILL_ENV) == f"{point}:{step}":
        os.kill(os.getpid(), signal.SIGKILL)


def is_complete(path: str) -> bool:
    """Whether ``path`` holds a manifest and every file it lists, with the listed sizes."""
    try:
        with open(os.path.join(path, MANIFEST), encoding="utf-8") as handle:
            manifest = json.load(handle)
        return all(os.path.getsize(os.path.join(path, rel)) == size for rel, size in manifest["files"].items())
    except (OSError, ValueError, KeyError, TypeError):
        return False


def read_step(path: str) -> int:
    """The step recorded in a complete checkpoint's manifest; :class:`CheckpointError` otherwise."""
    if not is_complete(path):
        raise CheckpointError(
            f"{path!r} is not a complete checkpoint: its {MANIFEST} is missing or lists files that are "
            f"missing or truncated (a save that was interrupted)"
        )
    with open(os.path.join(path, MANIFEST), encoding="utf-8") as handle:
        return int(json.load(handle)["step"])


class CheckpointManager:
    """Saves and finds the checkpoints of one run under ``<run_dir>/checkpoints``.

    ``keep_last_n`` (0: keep all) complete checkpoints are kept after each successful save.
    """

    def __init__(self, run_dir: str, keep_last_n: int = 0) -> None:
        if keep_last_n < 0:
            raise ValueError(f"trainer.keep_last_n must be >= 0, got {keep_last_n}")
        self.root = os.path.join(run_dir, CHECKPOINTS_DIR)
        self.keep_last_n = keep_last_n

    def complete(self) -> list[Checkpoint]:
        """The complete checkpoints, oldest first."""
        if not os.path.isdir(self.root):
            return []
        found = []
        for name in os.listdir(self.root):
            match = _NAME.match(name)
            path = os.path.join(self.root, name)
            if match and is_complete(path):
                found.append(Checkpoint(path, int(match.group(1))))
        return sorted(found, key=lambda checkpoint: checkpoint.step)

    def latest(self) -> Checkpoint | None:
        """The newest complete checkpoint (also when a kill came between its rename and the update
        of the ``latest`` pointer), or None."""
        found = self.complete()
        return found[-1] if found else None

    def save(self, step: int, write: Callable[[str], None]) -> Checkpoint:
        """Write checkpoint ``step``: ``write(folder)`` fills a fresh temporary folder, then the
        manifest is written, every file fsynced, the folder renamed to ``global_step_<step>`` and
        the ``latest`` pointer updated. When writing fails — an ``OSError`` (disk full included) or a
        library's own error (DCP's ``CheckpointException``, a ``BaseException``; safetensors'
        ``SafetensorError``) — the temporary folder is removed, earlier checkpoints are untouched and
        :class:`CheckpointError` says what failed (and whether the disk was full, see
        :func:`disk_was_full`). An interrupt (Ctrl-C) propagates as a ``KeyboardInterrupt``, also when
        a library caught it and raised an error of its own (DCP wraps it; :mod:`rlloom_trainer.sigint`
        remembers it when the library loses it), leaving the temporary folder to the next save."""
        os.makedirs(self.root, exist_ok=True)
        for name in os.listdir(self.root):
            if name.endswith(".tmp"):
                shutil.rmtree(os.path.join(self.root, name), ignore_errors=True)
        final = os.path.join(self.root, f"{PREFIX}{step}")
        tmp = final + ".tmp"
        try:
            os.makedirs(tmp)
            write(tmp)
            _kill_point("during_save", step)
            files = _files(tmp)
            for rel in files:
                fsync_path(os.path.join(tmp, rel))
            write_atomic(os.path.join(tmp, MANIFEST), json.dumps({"step": step, "files": files}, indent=1).encode())
            if os.path.exists(final):
                shutil.rmtree(final)
            os.replace(tmp, final)
            fsync_path(self.root)
            _kill_point("before_latest", step)
            write_atomic(os.path.join(self.root, LATEST), f"{PREFIX}{step}\n".encode())
        except (KeyboardInterrupt, SystemExit):
            raise
        except BaseException as error:  # noqa: BLE001 - DCP's CheckpointException derives from BaseException
            if sigint.received() or any(isinstance(cause, KeyboardInterrupt) for cause in error_chain(error)):
                raise KeyboardInterrupt from error
            full = disk_was_full(error, self.root)
            shutil.rmtree(tmp, ignore_errors=True)
            previous = self.latest()
            kept = (f"the previous checkpoint {previous.path!r} is intact" if previous
                    else "no earlier checkpoint exists")
            cause = "the disk is full" if full else "a write failed"
            detail = str(error).strip().splitlines()[-1] if str(error).strip() else type(error).__name__
            raise CheckpointError(f"saving checkpoint {final!r} failed: {cause} ({type(error).__name__}: {detail}); "
                                  f"{kept}") from error
        self._prune()
        return Checkpoint(final, step)

    def _prune(self) -> None:
        if self.keep_last_n:
            for checkpoint in self.complete()[: -self.keep_last_n]:
                shutil.rmtree(checkpoint.path, ignore_errors=True)
