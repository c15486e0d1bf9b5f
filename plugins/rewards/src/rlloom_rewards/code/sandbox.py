"""Run an untrusted Python program in a sandboxed child process and say whether it passed.

:func:`run_python` writes the program to ``solution.py`` in a fresh throw-away directory and runs
it with :mod:`rlloom_rewards.code.guard` (which isolates the network, sets the resource limits,
drops root to ``nobody``, installs the audit hook; see there) in a new session, with stdin from
``/dev/null``, stdout/stderr to anonymous files, a minimal environment and ``python -I -S -B``
(no site-packages: the program gets the standard library only).

As root, the guard first moves the run into new mount, PID, network, IPC and UTS namespaces with a
private size-capped tmpfs as its root (:mod:`rlloom_rewards.code.jail`);
SIGTERM makes the guard SIGKILL the namespace's init. The parent waits at most ``timeout_s`` seconds
of wall clock, then sends that SIGTERM (the kernel kills every process of the namespace, ``setsid``
ones included; a guard that already exited had reaped the init, so the namespace is gone), waits
up to :data:`KILL_GRACE_S` for the guard to exit, SIGKILLs the guard's process group and removes
the directory. Without root there is no namespace: only the process group is killed.

Status: ``"pass"`` (exit status 0), ``"timeout"`` (wall clock or CPU limit reached), ``"error"``
(the sandbox itself could not be set up: no interpreter, guard setup failed), ``"fail"``
(anything else: a failed assertion, an exception, a refused operation, a resource limit).
"""

from __future__ import annotations

import contextlib
import json
import math
import os
import pwd
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import warnings
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from rlloom_rewards.code.guard import SETUP_FAILED

PASS, FAIL, TIMEOUT, ERROR = "pass", "fail", "timeout", "error"
GUARD = str(Path(__file__).with_name("guard.py"))
OUTPUT_TAIL_CHARS = 4000
KILL_GRACE_S = 5.0  # how long the guard may take to report its namespace gone


@dataclass(frozen=True)
class SandboxLimits:
    """What one run may use. The CPU limit is ``ceil(timeout_s)`` seconds."""

    timeout_s: float = 5.0  # wall clock
    memory_mb: int = 512  # address space
    file_size_mb: int = 16  # largest file written (stdout/stderr included)
    max_processes: int = 16  # RLIMIT_NPROC: processes of the sandbox user
    disk_mb: int = 64  # size of the private tmpfs holding every file a run writes (as root)

    def __post_init__(self) -> None:
        for name in ("timeout_s", "memory_mb", "file_size_mb", "max_processes", "disk_mb"):
            if not getattr(self, name) > 0:
                raise ValueError(f"sandbox limit {name} must be > 0, got {getattr(self, name)}")


@dataclass(frozen=True)
class SandboxResult:
    """How a run ended. ``stdout``/``stderr`` are the last characters the program wrote;
    ``process_group`` is the id of the (killed) process group the program ran in."""

    status: str
    returncode: int | None
    stdout: str
    stderr: str
    seconds: float
    process_group: int | None


def _sandbox_user() -> tuple[int, int]:
    try:
        entry = pwd.getpwnam("nobody")
        return entry.pw_uid, entry.pw_gid
    except KeyError:
        return 65534, 65534


def _usable_by_others(path: str) -> bool:
    """Whether a user other than the owner can execute ``path`` (every directory on the way has
    the ``x`` bit for others, and so has the file)."""
    real = os.path.realpath(path)
    if not os.path.isfile(real) or not os.stat(real).st_mode & 0o001:
        return False
    directory = os.path.dirname(real)
    while True:
        if not os.stat(directory).st_mode & 0o001:
            return False
        if directory == os.path.dirname(directory):
            return True
        directory = os.path.dirname(directory)


def sandbox_python(configured: str = "", key: str = "reward.python") -> str:
    """The interpreter sandboxed programs run with: ``configured`` when given, else this process's
    interpreter; as root (the program then runs as ``nobody``) the first of this interpreter and the
    system ``python3`` that ``nobody`` can execute. ``ValueError`` naming ``key`` (the setting
    ``configured`` came from) when there is none."""
    if configured:
        if not os.path.isfile(configured):
            raise ValueError(f"{key}={configured!r} is not a file")
        return configured
    own = getattr(sys, "_base_executable", sys.executable)
    if os.geteuid() != 0:
        return own
    candidates = [own, sys.executable, shutil.which("python3", path="/usr/local/bin:/usr/bin:/bin")]
    for candidate in candidates:
        if candidate and _usable_by_others(candidate):
            return candidate
    raise ValueError(
        f"running as root, sandboxed programs run as 'nobody', who cannot execute any of {candidates}; "
        f"set {key} to an interpreter every user can run (e.g. /usr/bin/python3)"
    )


@dataclass
class SandboxConfig:
    """The sandbox settings of a config that runs programs (``reward=code``, the tool ``python``): each
    run's limits (:class:`SandboxLimits`: ``timeout_s`` of wall clock and ``ceil(timeout_s)`` s of CPU,
    ``memory_mb``, ``file_size_mb``, ``max_processes``, ``disk_mb`` of private tmpfs as root),
    ``allow_unsandboxed`` (without root: run with the weak guard-only sandbox, docs/sandbox.md) and
    ``python`` (the programs' interpreter; "": see :func:`sandbox_python`)."""

    timeout_s: float = 5.0  # wall clock per program, seconds (CPU: ceil of it)
    memory_mb: int = 512  # address space per program
    file_size_mb: int = 16  # largest file a program writes (stdout/stderr included)
    max_processes: int = 16  # processes of the sandbox user (RLIMIT_NPROC)
    disk_mb: int = 64  # private tmpfs for every file a program writes
    allow_unsandboxed: bool = False  # without root: run in the weak guard-only sandbox (docs/sandbox.md)
    python: str = ""  # the programs' interpreter; "": this one (as root: one that nobody may run)

    def sandbox_limits(self) -> SandboxLimits:
        return SandboxLimits(self.timeout_s, self.memory_mb, self.file_size_mb, self.max_processes, self.disk_mb)

    def contained_python(self, what: str, section: str) -> str:
        """The interpreter ``what`` (``reward=code``) runs programs with (:func:`sandbox_python`, its
        setting named ``<section>.python``). Without root: a RuntimeError unless ``allow_unsandboxed``
        (then a RuntimeWarning), since only root gets kernel containment."""
        if os.geteuid() != 0:
            if not self.allow_unsandboxed:
                raise RuntimeError(
                    f"{what} contains untrusted code with kernel namespaces, which needs root here "
                    f"(docs/sandbox.md); set {section}.allow_unsandboxed=true to run it with the weak "
                    "guard-only sandbox")
            warnings.warn(f"{what} runs untrusted code WITHOUT kernel containment ({section}.allow_unsandboxed=true)",
                          RuntimeWarning, stacklevel=3)
        return sandbox_python(self.python, f"{section}.python")


def _wait_without_reaping(pid: int, timeout_s: float) -> bool:
    """Wait until ``pid`` exits or ``timeout_s`` passes; the exited child is left unreaped, so its
    process-group id cannot be reused before we kill the group. ``True`` if it exited."""
    deadline = time.monotonic() + timeout_s
    pause = 0.001
    while True:
        if os.waitid(os.P_PID, pid, os.WEXITED | os.WNOHANG | os.WNOWAIT) is not None:
            return True
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            return False
        time.sleep(min(pause, remaining))
        pause = min(pause * 2, 0.02)


def _tail(stream) -> str:
    stream.seek(0)
    return stream.read().decode("utf-8", errors="replace")[-OUTPUT_TAIL_CHARS:]


class StartFailed(Exception):
    """The interpreter could not be started; ``result`` is the :data:`ERROR` result that says so."""

    def __init__(self, result: SandboxResult) -> None:
        super().__init__(result.stderr)
        self.result = result


class SandboxRun:
    """One sandboxed program, started by :func:`started`; :meth:`finish` ends it and says how."""

    def __init__(self, process: subprocess.Popen, limits: SandboxLimits, start: float, stdout, stderr) -> None:
        self.process, self.limits, self.start = process, limits, start
        self.stdout, self.stderr = stdout, stderr

    def finish(self, wait_s: float) -> SandboxResult:
        """Wait up to ``wait_s`` for the program to exit, then end it and its namespace (module doc)."""
        process, limits = self.process, self.limits
        exited = _wait_without_reaping(process.pid, wait_s)
        if not exited and os.geteuid() == 0:
            process.terminate()  # the guard SIGKILLs its namespace's init (jail.py)
            _wait_without_reaping(process.pid, KILL_GRACE_S)
        try:
            os.killpg(process.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        returncode = process.wait()
        seconds = time.monotonic() - self.start
        # The CPU limit (SIGXCPU, or SIGKILL at the hard limit) can beat the wall clock when this
        # process is descheduled on a loaded machine: a signal death past the timeout is a timeout.
        if not exited or returncode == -signal.SIGXCPU or (returncode < 0 and seconds >= limits.timeout_s):
            status = TIMEOUT
        elif returncode == 0:
            status = PASS
        elif returncode == SETUP_FAILED:
            status = ERROR
        else:
            status = FAIL
        return SandboxResult(status, returncode, _tail(self.stdout), _tail(self.stderr), seconds, process.pid)


@contextlib.contextmanager
def started(source: str, limits: SandboxLimits, python: str, serve: tuple[int, int] | None = None
            ) -> Iterator[SandboxRun]:
    """``source`` running in the sandbox (module doc); its directory is removed on exit. ``serve``: the
    ``(requests, replies)`` pipe ends the program answers calls on once its module has run
    (:mod:`rlloom_rewards.code.wire`); they are passed to it, and the caller closes its own copies.
    :class:`StartFailed` when the interpreter cannot be started."""
    workdir = tempfile.mkdtemp(prefix="rlloom-sandbox-")
    uid, gid = _sandbox_user()
    start = time.monotonic()
    try:
        Path(workdir, "solution.py").write_text(source, encoding="utf-8")
        if os.geteuid() == 0:
            os.chown(workdir, uid, gid)
        settings = {
            "workdir": workdir,
            "cpu_s": max(1, math.ceil(limits.timeout_s)),
            "memory_bytes": limits.memory_mb * 2**20,
            "file_size_bytes": limits.file_size_mb * 2**20,
            "max_processes": limits.max_processes,
            "isolate_network": True,
            "disk_bytes": limits.disk_mb * 2**20,
            "uid": uid,
            "gid": gid,
            "serve": {"requests_fd": serve[0], "replies_fd": serve[1]} if serve else None,
        }
        with tempfile.TemporaryFile() as stdout, tempfile.TemporaryFile() as stderr:
            try:
                process = subprocess.Popen(
                    [python, "-I", "-S", "-B", GUARD, json.dumps(settings)],
                    stdin=subprocess.DEVNULL, stdout=stdout, stderr=stderr, cwd=workdir,
                    env={"PATH": "/usr/bin:/bin", "LANG": "C.UTF-8", "HOME": workdir},
                    start_new_session=True, close_fds=True, pass_fds=serve or (),
                )
            except OSError as exc:
                raise StartFailed(SandboxResult(ERROR, None, "", f"cannot start {python}: {exc}",
                                                time.monotonic() - start, None)) from None
            run = SandboxRun(process, limits, start, stdout, stderr)
            try:
                yield run
            finally:
                if process.returncode is None:
                    run.finish(0.0)
    finally:
        shutil.rmtree(workdir, ignore_errors=True)


def run_python(source: str, limits: SandboxLimits, python: str) -> SandboxResult:
    """Run ``source`` in the sandbox and say how it ended (its exit status is the only outcome)."""
    try:
        with started(source, limits, python) as run:
            return run.finish(limits.timeout_s)
    except StartFailed as failed:
        return failed.result
