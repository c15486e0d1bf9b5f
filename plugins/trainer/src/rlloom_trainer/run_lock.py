"""One run per run folder: ``rlloom train`` (:func:`rlloom_trainer.run.fit_run`) holds an exclusive
``flock`` on ``<run_dir>/run.lock`` from before it writes anything in the folder until it ends, and writes its
pid into that file. The kernel releases the lock when the process ends, however it ends (SIGKILL included),
so a lock file left by a killed run never blocks the next one; a second run on a folder whose run is alive is
refused with :class:`RunFolderInUse` (a config error: exit status 2) naming the holder's pid. The file is
opened close-on-exec, so processes the run starts (workers, sandboxes) do not hold the lock after it ends."""

from __future__ import annotations

import contextlib
import fcntl
import os
from collections.abc import Iterator

from rlloom.config import ConfigError

LOCK_FILE = "run.lock"


class RunFolderInUse(ConfigError):
    """Another live process holds the run folder's lock."""


def _holder(fd: int) -> str:
    """The pid the lock's holder wrote, or a phrase when it has not written it yet."""
    written = os.pread(fd, 32, 0).decode("ascii", errors="replace").strip()
    return f"pid {written}" if written.isdigit() else "a process that has not written its pid yet"


def unwritable(run_dir: str, error: OSError) -> ConfigError:
    """The config error of a run folder that cannot be made or written."""
    return ConfigError(f"trainer.run_dir={run_dir}: the run folder cannot be made or written ({error}); choose "
                       f"another trainer.run_dir or trainer.run_name")


@contextlib.contextmanager
def run_lock(run_dir: str) -> Iterator[None]:
    """Hold the lock of ``run_dir`` (created if missing) inside the block (see the module doc)."""
    try:
        os.makedirs(run_dir, exist_ok=True)
        fd = os.open(os.path.join(run_dir, LOCK_FILE), os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o644)
    except OSError as error:
        raise unwritable(run_dir, error) from None
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            raise RunFolderInUse(
                f"the run folder {run_dir} is in use by another rlloom train ({_holder(fd)}, which holds "
                f"{os.path.join(run_dir, LOCK_FILE)}); wait for it to end, or pass another trainer.run_name or "
                f"trainer.run_dir") from None
        os.ftruncate(fd, 0)
        os.pwrite(fd, f"{os.getpid()}\n".encode(), 0)
        yield
    finally:
        os.close(fd)  # releases the lock
