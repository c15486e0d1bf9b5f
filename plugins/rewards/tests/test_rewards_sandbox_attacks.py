"""Hostile programs against the kernel containment (``jail.py``; root only): each attack must leave no
process, no file outside the private tmpfs, and return within its timeout plus a small slack.

``escaped`` is what the program reports on stdout when the attack worked (it never may); programs that
merely do harm inside the jail may exit 0, which ``reward=code`` never reads as a pass: each attack, as the
candidate of :func:`~rlloom_rewards.code.harness.run_tests`, fails the tests and is contained the same way
(the verdict's own tests: ``test_rewards_verdict.py``)."""

from __future__ import annotations

import os
import time
import uuid

import pytest
from rlloom_rewards.code.harness import CheckJob, run_tests
from rlloom_rewards.code.sandbox import PASS, SandboxLimits, run_python, sandbox_python

pytestmark = pytest.mark.skipif(os.geteuid() != 0, reason="the kernel containment runs as root only")

LIMITS = SandboxLimits(timeout_s=2.0, memory_mb=256, file_size_mb=1, max_processes=8, disk_mb=8)
# Every attack that would outlive the timeout sleeps or spins for 600 s, so a call that returns within
# timeout + SLACK_S was cut by the sandbox, however loaded the machine is.
SLACK_S = 20.0
MARK = f"rlloom-attack-{uuid.uuid4().hex[:8]}"
HOST_DIRS = ("/tmp", "/dev/shm", "/var/tmp")

ATTACKS = {
    "exit 0 before the tests run": "import os\nprint('PASSED')\nos._exit(0)\nassert False\n",
    "dir_fd write to /tmp": (
        "import os\nfd = os.open('/tmp', os.O_RDONLY)\n"
        f"os.close(os.open('{MARK}', os.O_CREAT | os.O_WRONLY, dir_fd=fd))\n"
    ),
    "fork_exec shell writes to /tmp and /dev/shm": (
        "import _posixsubprocess, os\n"
        f"args = [b'/bin/sh', b'-c', b'touch /tmp/{MARK} /dev/shm/{MARK} /var/tmp/{MARK}']\n"
        "r, w = os.pipe()\n"
        "pid = _posixsubprocess.fork_exec(args, [b'/bin/sh'], True, (), None, None, -1, -1, -1, -1, -1, -1,"
        " r, w, True, False, -1, None, None, None, -1, None, False)\n"
        "os.waitpid(pid, 0)\n"
    ),
    "setsid child ignoring SIGTERM": (
        "import os, signal, time\nif os.fork() == 0:\n    os.setsid()\n"
        "    signal.signal(signal.SIGTERM, signal.SIG_IGN)\n    time.sleep(600)\n"
    ),
    "setsid child, parent hangs past the timeout": (
        "import os, signal, time\nif os.fork() == 0:\n    os.setsid()\n"
        "    signal.signal(signal.SIGTERM, signal.SIG_IGN)\n    time.sleep(600)\nsignal.signal(signal.SIGTERM, "
        "signal.SIG_IGN)\nwhile True:\n    pass\n"
    ),
    "double-forked grandchild": (
        "import os, time\nif os.fork() == 0:\n    if os.fork() == 0:\n        os.setsid()\n        time.sleep(600)\n"
        "    os._exit(0)\ntime.sleep(0.1)\n"
    ),
    "fork storm under the process limit": (
        "import os, time\nfor _ in range(100):\n    try:\n        if os.fork() == 0:\n            time.sleep(600)\n"
        "    except OSError:\n        pass\n"
    ),
    "stdout flooder left running": (
        "import os, sys\nif os.fork() == 0:\n    while True:\n        sys.stdout.write('x' * 4096)\n"
    ),
    "read the host's project": (
        "import os\nprint('escaped' if os.path.exists('/work/main/README.md') or os.path.exists('/root') else 'no')\n"
    ),
    "read other candidates' files": (
        "import glob\nprint('escaped' if glob.glob('/tmp/rlloom-sandbox-*') else 'no')\n"
    ),
    "fill the disk with many files": (
        "import os\nfor i in range(64):\n    with open(f'/tmp/f{i}', 'wb') as f:\n        f.write(b'x' * (2**20 - 1))\n"
    ),
    "symlink escape": (
        "import os\nos.symlink('/etc', 'link')\n"
        f"open('link/{MARK}', 'w').write('x')\n"
    ),
    "hard link to a host file": (
        "import os\nos.link('/usr/bin/env', 'env')\nopen('env', 'a').write('x')\n"
    ),
    "ptrace the parent": (
        "import ctypes\nlibc = ctypes.CDLL(None)\nprint('escaped' if libc.ptrace(16, 1, 0, 0) == 0 else 'no')\n"
    ),
    "/proc/self/mem write": (
        "import os\nfd = os.open('/proc/1/mem', os.O_RDWR)\nos.lseek(fd, 0x400000, 0)\nos.write(fd, b'x')\n"
    ),
    "signal the parent": (
        "import os, signal\nfor pid in range(1, 400):\n    try:\n        os.kill(pid, signal.SIGKILL)\n"
        "    except OSError:\n        pass\n"
    ),
    "exhaust file descriptors": "fds = []\nwhile True:\n    fds.append(open('/dev/null'))\n",
    "LD_PRELOAD for a shell": (
        "import _posixsubprocess, os\n"
        f"env = [b'LD_PRELOAD=/tmp/x.so', b'X=/tmp/{MARK}']\n"
        "r, w = os.pipe()\n"
        "pid = _posixsubprocess.fork_exec([b'/bin/sh', b'-c', b'touch $X'], [b'/bin/sh'], True, (), None, env,"
        " -1, -1, -1, -1, -1, -1, r, w, True, False, -1, None, None, None, -1, None, False)\n"
        "os.waitpid(pid, 0)\n"
    ),
}


def nobody_processes() -> set[int]:
    pids = set()
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                if os.stat(f"/proc/{entry}").st_uid == 65534:
                    pids.add(int(entry))
            except FileNotFoundError:
                pass
    return pids


def nobody_files() -> set[str]:
    """The entries of the host's shared folders owned by the sandbox's user (nobody): what a candidate
    that escaped its private /tmp would leave (the host's free space is no measure: other programs
    write there too)."""
    found = set()
    for folder in HOST_DIRS:
        for entry in os.scandir(folder):
            try:
                if entry.stat(follow_symlinks=False).st_uid == 65534:
                    found.add(entry.path)
            except FileNotFoundError:
                pass
    return found


def marks_on_host() -> list[str]:
    return [os.path.join(d, MARK) for d in (*HOST_DIRS, "/etc") if os.path.exists(os.path.join(d, MARK))]


@pytest.fixture(scope="module")
def python() -> str:
    return sandbox_python()


@pytest.mark.parametrize("name", list(ATTACKS))
def test_attack_is_contained(python, name):
    before, files_before = nobody_processes(), nobody_files()
    start = time.monotonic()
    result = run_python(ATTACKS[name], LIMITS, python)
    assert time.monotonic() - start < LIMITS.timeout_s + SLACK_S
    assert "escaped" not in result.stdout
    assert not nobody_processes() - before, "a process outlived the call"
    assert marks_on_host() == []
    assert nobody_files() - files_before == set()
    assert os.path.getsize("/usr/bin/env") > 0


def shared_memory_kib() -> int:
    """``Shmem`` of /proc/meminfo: what tmpfs files hold in memory, host-wide."""
    with open("/proc/meminfo") as meminfo:
        return next(int(line.split()[1]) for line in meminfo if line.startswith("Shmem:"))


def test_the_private_tmpfs_caps_the_disk_and_its_memory_comes_back(python):
    before = shared_memory_kib()
    program = "for i in range(64):\n    open(f'f{i}', 'wb').write(b'x' * (2**20 - 1))\n"
    result = run_python(program, LIMITS, python)
    assert result.status != PASS and "No space left" in result.stderr
    assert shared_memory_kib() < before + LIMITS.disk_mb * 1024 // 2  # the full 8 MB tmpfs is gone


@pytest.mark.parametrize("name", list(ATTACKS))
def test_attack_as_a_candidate_fails_the_tests_and_is_contained(python, name):
    before = nobody_processes()
    start = time.monotonic()
    outcome = run_tests(CheckJob(candidate=ATTACKS[name], tests="assert solve() == 1\n"), LIMITS, python)
    assert time.monotonic() - start < LIMITS.timeout_s + SLACK_S
    assert not outcome.passed and outcome.error is None
    assert "escaped" not in outcome.sandbox.stdout
    assert not nobody_processes() - before, "a process outlived the call"
    assert marks_on_host() == []
