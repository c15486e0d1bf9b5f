"""The code sandbox contains hostile programs: each is a failure, and the test process is unaffected."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import tempfile
import time

import pytest
from rlloom_rewards.code.harness import CheckJob, run_tests
from rlloom_rewards.code.sandbox import FAIL, KILL_GRACE_S, PASS, TIMEOUT, SandboxLimits, run_python, sandbox_python

# A roomy timeout: each of these programs ends at once unless the sandbox fails, and starting a sandboxed Python
# on a loaded machine took over 2 s (`test_program_sees_no_network_interface_but_loopback` printed, then timed
# out). The timeout's own test sets a short one.
LIMITS = SandboxLimits(timeout_s=30.0, memory_mb=256, file_size_mb=1, max_processes=8)


@pytest.fixture(scope="module")
def python() -> str:
    return sandbox_python()


def group_is_gone(process_group: int, within_s: float = 5.0) -> bool:
    """Whether no process of ``process_group`` is left (killed processes may take a moment)."""
    deadline = time.monotonic() + within_s
    while time.monotonic() < deadline:
        try:
            os.killpg(process_group, 0)
        except ProcessLookupError:
            return True
        time.sleep(0.05)
    return False


def test_a_correct_program_passes_and_its_output_is_kept(python):
    result = run_python("def add(a, b):\n    return a + b\n\nassert add(2, 3) == 5\nprint('ok')\n", LIMITS, python)
    assert (result.status, result.returncode, result.stdout) == (PASS, 0, "ok\n")


def test_a_failed_assertion_fails(python):
    result = run_python("assert 1 + 1 == 3\n", LIMITS, python)
    assert result.status == FAIL and "AssertionError" in result.stderr


def test_infinite_loop_times_out(python):
    """Cut at the timeout: not before it, and (the loop never ends) within the guard's grace to end its namespace
    plus a margin for a loaded machine, as the sandbox measures it."""
    result = run_python("while True:\n    pass\n", SandboxLimits(timeout_s=1.0), python)
    assert result.status == TIMEOUT
    assert 1.0 <= result.seconds < 1.0 + KILL_GRACE_S + 20.0
    assert group_is_gone(result.process_group)


# Recursion through a C function (map) grows the C stack past its end: a real SIGSEGV, which the kernel delivers
# even to PID 1 of the sandbox's namespace (a signal the program sends itself there is ignored).
SEGFAULT = "import sys\nsys.setrecursionlimit(10**8)\ndef f(_=0):\n    return list(map(f, [0]))\n"


def test_a_program_killed_by_a_signal_fails_and_is_no_timeout(python):
    result = run_python(SEGFAULT + "f()\n", LIMITS, python)
    assert (result.status, result.returncode) == (FAIL, -signal.SIGSEGV), result
    outcome = run_tests(CheckJob(candidate=SEGFAULT + "def add(a, b):\n    return f()\n",
                                 tests="assert add(2, 3) == 5\n"), LIMITS, python)
    assert not outcome.passed and not outcome.timed_out and outcome.sandbox.returncode == -signal.SIGSEGV


def test_memory_bomb_fails_with_memory_error(python):
    result = run_python("blocks = []\nwhile True:\n    blocks.append(bytearray(10**7))\n", LIMITS, python)
    assert result.status == FAIL and "MemoryError" in result.stderr


def test_fork_bomb_fails_and_leaves_no_process(python):
    program = "import os, time\nwhile True:\n    if os.fork() == 0:\n        time.sleep(60)\n"
    result = run_python(program, LIMITS, python)
    assert result.status == FAIL and "BlockingIOError" in result.stderr
    assert group_is_gone(result.process_group)
    assert subprocess.run(["true"], check=False).returncode == 0  # this process can still start processes


def test_network_socket_attempt_fails_and_reaches_nothing(python):
    with socket.socket() as server:
        server.bind(("127.0.0.1", 0))
        server.listen()
        server.settimeout(0.5)
        port = server.getsockname()[1]
        program = f"import socket\nsocket.create_connection(('127.0.0.1', {port}), timeout=1).sendall(b'hi')\n"
        result = run_python(program, LIMITS, python)
        with pytest.raises(TimeoutError):
            server.accept()
    assert result.status == FAIL and "socket" in result.stderr and "not allowed" in result.stderr


@pytest.mark.skipif(os.geteuid() != 0, reason="a network namespace needs root (else only the audit hook blocks)")
def test_program_sees_no_network_interface_but_loopback(python):
    program = "print(sorted(line.split(':')[0].strip() for line in open('/proc/self/net/dev').readlines()[2:]))\n"
    result = run_python(program, LIMITS, python)
    assert (result.status, result.stdout) == (PASS, "['lo']\n")


@pytest.mark.parametrize("how", ["open", "symlink", "rename", "shell"])
def test_writing_outside_the_working_directory_fails(python, how):
    outside = tempfile.mkdtemp(prefix="rlloom-sandbox-test-")
    os.chmod(outside, 0o777)  # writable by anyone: only the sandbox itself can stop the write
    target = os.path.join(outside, "escaped.txt")
    program = {
        "open": f"open({target!r}, 'w').write('x')\n",
        "symlink": f"import os\nos.symlink({target!r}, 'link')\nopen('link', 'w').write('x')\n",
        "rename": f"import os\nopen('mine.txt', 'w').write('x')\nos.rename('mine.txt', {target!r})\n",
        "shell": f"import os\nos.system('touch {target}')\n",
    }[how]
    try:
        result = run_python(program, LIMITS, python)
        assert result.status == FAIL and "PermissionError" in result.stderr
        assert not os.path.exists(target)
    finally:
        os.rmdir(outside)


def test_writing_inside_the_working_directory_works_and_is_thrown_away(python):
    program = "import os\nopen('notes.txt', 'w').write('x')\nos.mkdir('d')\nprint(os.getcwd())\n"
    result = run_python(program, LIMITS, python)
    assert result.status == PASS
    assert not os.path.exists(os.path.join(result.stdout.strip(), "notes.txt"))


def test_file_size_limit(python):
    result = run_python("open('big.bin', 'wb').write(b'x' * 2 * 2**20)\n", LIMITS, python)
    assert result.status == FAIL and "File too large" in result.stderr
