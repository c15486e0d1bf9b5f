"""Run checkpoints on disk: atomic writes, completeness checks, the ``latest`` pointer, retention.

Layout under ``<run_dir>/checkpoints/``::

    global_step_<N>/            one complete checkpoint (written as global_step_<N>.tmp, then renamed)
        actor/  critic/         what each train engine's ``save`` wrote
        trainer_state.pt        the run's state (rlloom_trainer.run_state.TrainerState)
        config.yaml             the resolved run config
        manifest.json           written LAST: {"step": N, "files": {relative path: {"bytes": size,
                                "sha256": digest}}} (before checksums: {relative path: size})
    global_step_<N>.damaged/    a checkpoint a resume found damaged, moved aside (never read again)
    latest                      the name of the newest complete checkpoint (written last, atomically)

A checkpoint is *complete* when its ``manifest.json`` exists and every file it lists exists with the
listed size (cheap: listing, pruning, messages); it is *intact* when, besides, every file's SHA-256
equals the manifest's (:func:`damage`, reading every byte: what a resume, ``rlloom eval`` and ``rlloom
export`` check before loading). A process killed at any point leaves either a complete checkpoint or a
``*.tmp`` folder, which is ignored when resuming and removed by the next save; a resume skips any
checkpoint that is not intact, says which and why, and continues from the newest intact one
(:meth:`CheckpointManager.newest_intact`).

Fault injection (tests): with ``RLLOOM_TEST_KILL_AT=<point>:<step>`` in the environment the process
sends itself SIGKILL at that point of the save of step ``<step>``. Points: ``during_save`` (the
checkpoint's files are written, its manifest is not), ``before_latest`` (the folder is renamed,
the ``latest`` pointer not yet updated).
"""

from __future__ import annotations

import errno
import hashlib
import json
import os
import re
import shutil
import signal
import sys
from collections.abc import Callable, Iterator
from dataclasses import dataclass

from rlloom.errors import RunFailedError

from rlloom_trainer import sigint

RESUME_MARKER = "training/resumed_from_step"
"""The metric the first row logged after a resume carries: the step the run resumed from."""

CHECKPOINTS_DIR = "checkpoints"
PREFIX = "global_step_"
MANIFEST = "manifest.json"
DIGEST = "sha256"
DAMAGED_SUFFIX = ".damaged"
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


def file_digest(path: str) -> str:
    """The hex SHA-256 of the file at ``path``, read in chunks."""
    with open(path, "rb") as handle:
        return hashlib.file_digest(handle, DIGEST).hexdigest()


def _files(root: str) -> dict[str, dict[str, int | str]]:
    """Relative path → ``{"bytes": size, "sha256": digest}`` of every file under ``root``."""
    entries = {}
    for folder, _, names in os.walk(root):
        for name in names:
            full = os.path.join(folder, name)
            entries[os.path.relpath(full, root)] = {"bytes": os.path.getsize(full), DIGEST: file_digest(full)}
    return entries


def _listed_size(entry: int | dict) -> int:
    """The size a manifest entry gives (a plain int in manifests written before checksums)."""
    return entry if isinstance(entry, int) else entry["bytes"]


def read_manifest(path: str) -> dict:
    """The manifest of checkpoint folder ``path`` (``OSError``, ``ValueError`` when unreadable)."""
    with open(os.path.join(path, MANIFEST), encoding="utf-8") as handle:
        manifest = json.load(handle)
    if not isinstance(manifest, dict) or not isinstance(manifest.get("files"), dict):
        raise ValueError(f"{MANIFEST} is not a checkpoint manifest")
    return manifest


def has_checksums(path: str) -> bool:
    """Whether the manifest of the complete checkpoint ``path`` carries a checksum for every file."""
    return all(isinstance(entry, dict) for entry in read_manifest(path)["files"].values())


def _kill_point(point: str, step: int) -> None:
    if os.environ.get(KILL_ENV) == f"{point}:{step}":
        os.kill(os.getpid(), signal.SIGKILL)


def is_complete(path: str) -> bool:
    """Whether ``path`` holds a manifest and every file it lists, with the listed sizes."""
    try:
        files = read_manifest(path)["files"]
        return all(os.path.getsize(os.path.join(path, rel)) == _listed_size(entry) for rel, entry in files.items())
    except (OSError, ValueError, KeyError, TypeError):
        return False


def damage(path: str) -> str | None:
    """Why the checkpoint folder ``path`` cannot be trusted, naming the file — its manifest unreadable, a
    listed file missing, of another size or with another SHA-256 than the manifest says — or None when it
    is intact. Files of a manifest written before checksums are checked by size only."""
    try:
        files = read_manifest(path)["files"]
    except (OSError, ValueError) as error:
        return f"its {MANIFEST} is missing or unreadable ({type(error).__name__}: {error})"
    for rel, entry in files.items():
        full = os.path.join(path, rel)
        try:
            size = os.path.getsize(full)
            if size != _listed_size(entry):
                return f"{rel} has {size} bytes where its manifest says {_listed_size(entry)} (truncated or rewritten)"
            if isinstance(entry, dict) and file_digest(full) != entry[DIGEST]:
                return f"{rel} does not match its {DIGEST} checksum (its content changed after it was written)"
        except FileNotFoundError:
            return f"{rel} is missing"
        except (OSError, KeyError, TypeError) as error:
            return f"{rel} cannot be checked ({type(error).__name__}: {error})"
    return None


def read_step(path: str) -> int:
    """The step recorded in a complete checkpoint's manifest; :class:`CheckpointError` otherwise."""
    if not is_complete(path):
        raise CheckpointError(
            f"{path!r} is not a complete checkpoint: its {MANIFEST} is missing or lists files that are "
            f"missing or truncated (a save that was interrupted)"
        )
    return int(read_manifest(path)["step"])


def check_folder(path: str) -> None:
    """:class:`CheckpointError` unless the checkpoint ``path`` is a folder (whether it is an intact checkpoint:
    :func:`verified_step`)."""
    if not os.path.isdir(path):
        raise CheckpointError(f"{path!r} is not a checkpoint folder")


def verified_step(path: str) -> int:
    """The step of the intact checkpoint ``path`` (:func:`damage`); :class:`CheckpointError` naming the
    damaged file otherwise."""
    check_folder(path)
    problem = damage(path)
    if problem is not None:
        raise CheckpointError(f"the checkpoint {path!r} is damaged: {problem}; it cannot be loaded")
    return read_step(path)


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
        return [checkpoint for checkpoint in self.folders() if is_complete(checkpoint.path)]

    def latest(self) -> Checkpoint | None:
        """The newest complete checkpoint (also when a kill came between its rename and the update
        of the ``latest`` pointer), or None."""
        found = self.complete()
        return found[-1] if found else None

    def folders(self) -> list[Checkpoint]:
        """Every ``global_step_<N>`` folder, complete or not, oldest first."""
        if not os.path.isdir(self.root):
            return []
        found = [Checkpoint(os.path.join(self.root, name), int(match.group(1)))
                 for name in os.listdir(self.root) if (match := _NAME.match(name))]
        return sorted(found, key=lambda checkpoint: checkpoint.step)

    def newest_intact(self) -> Checkpoint | None:
        """The newest intact checkpoint (:func:`damage`), or None. Each newer ``global_step_<N>`` folder is
        damaged: it is moved aside to ``global_step_<N>.damaged`` (so that neither pruning nor a later
        resume counts it), stderr says which and why, and the ``latest`` pointer names the intact one; a
        checkpoint written before checksums is said to be checked by size only."""
        moved = False
        for checkpoint in reversed(self.folders()):
            problem = damage(checkpoint.path)
            if problem is None:
                if moved:
                    write_atomic(os.path.join(self.root, LATEST), f"{PREFIX}{checkpoint.step}\n".encode())
                if not has_checksums(checkpoint.path):
                    print(f"rlloom: {checkpoint.path} was written before checkpoints carried checksums: its "
                          f"files were checked by size only", file=sys.stderr, flush=True)
                return checkpoint
            aside = checkpoint.path + DAMAGED_SUFFIX
            shutil.rmtree(aside, ignore_errors=True)
            os.replace(checkpoint.path, aside)
            moved = True
            print(f"rlloom: skipping the damaged checkpoint {checkpoint.path}: {problem}; moved it to {aside}",
                  file=sys.stderr, flush=True)
        return None

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
