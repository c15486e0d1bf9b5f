"""Scoring a candidate program from a channel it cannot forge.

The candidate's module runs in the sandbox (:func:`rlloom_rewards.code.sandbox.started`) and then only
answers calls into its functions (:mod:`rlloom_rewards.code.wire`); the tests run in a separate trusted
process outside the sandbox (:mod:`rlloom_rewards.code.tester`), which compares what the calls return,
as plain data, with what the tests expect. The verdict is that process's report, read from a pipe the
candidate never holds and matched by a nonce the candidate never sees. So nothing the candidate can do —
exit with status 0 before the tests run, print a pass marker, read the tests (they are not in its
sandbox), return an object whose ``__eq__`` says yes — counts as a pass.

``run_tests`` waits ``limits.timeout_s`` of wall clock for the whole exchange (the candidate's start, its
module, every call), then ends both processes.
"""

from __future__ import annotations

import json
import os
import secrets
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

from rlloom_rewards.code.sandbox import ERROR, SandboxLimits, SandboxResult, StartFailed, started

TESTER = str(Path(__file__).with_name("tester.py"))
CANDIDATE_EXIT_WAIT_S = 1.0  # after the tests: how long the candidate may take to see EOF and exit


@dataclass(frozen=True)
class CheckJob:
    """What to run. ``candidate``: the program built from the response (the task's prefix included, so
    its imports and helpers are there); ``prefix``: the task's own code, run again on the trusted side;
    ``tests`` and ``suffix``: the test code; ``entry_point``: the function the task asks for, if known."""

    candidate: str
    tests: str
    prefix: str = ""
    suffix: str = ""
    entry_point: str | None = None


@dataclass(frozen=True)
class CheckOutcome:
    """``passed``: every test statement ran; ``timed_out``: the exchange ran past the timeout; ``error``:
    the sandbox or the task's own code failed (neither is the candidate's fault); ``failure``: the first
    failing test's last line; ``sandbox``: how the candidate's process ended."""

    passed: bool
    timed_out: bool
    error: str | None
    failure: str | None
    completed: int
    statements: int
    sandbox: SandboxResult


def _run_tester(job: CheckJob, pipes: tuple[int, int], nonce: str, timeout_s: float) -> dict | None:
    """The tester's report, or ``None`` when it did not finish within ``timeout_s``."""
    request = {"nonce": nonce, "prefix": job.prefix, "tests": job.tests, "suffix": job.suffix,
               "entry_point": job.entry_point, "requests_fd": pipes[0], "replies_fd": pipes[1]}
    try:
        tester = subprocess.Popen(
            [sys.executable, "-I", "-B", TESTER], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL, pass_fds=pipes, env={"PATH": os.environ.get("PATH", "/usr/bin:/bin")},
        )
    finally:
        for fd in pipes:  # the tester holds its own copies
            os.close(fd)
    try:
        stdout, _ = tester.communicate(json.dumps(request).encode("utf-8"), timeout=timeout_s)
    except subprocess.TimeoutExpired:
        tester.kill()
        tester.communicate()
        return None
    for line in stdout.decode("utf-8", errors="replace").splitlines():
        try:
            report = json.loads(line)
        except ValueError:
            continue
        if isinstance(report, dict) and report.get("nonce") == nonce:
            return report
    return {"error": f"the tester ended (exit status {tester.returncode}) without a report"}


def run_tests(job: CheckJob, limits: SandboxLimits, python: str) -> CheckOutcome:
    """Run ``job`` (module doc) with the candidate sandboxed under ``limits``, started with ``python``."""
    requests_read, requests_write = os.pipe()
    replies_read, replies_write = os.pipe()
    nonce = secrets.token_hex(16)
    try:
        with started(job.candidate, limits, python, serve=(requests_read, replies_write)) as run:
            os.close(requests_read)
            os.close(replies_write)
            report = _run_tester(job, (requests_write, replies_read), nonce, limits.timeout_s)
            sandbox = run.finish(CANDIDATE_EXIT_WAIT_S)
    except StartFailed as failed:
        for fd in (requests_read, requests_write, replies_read, replies_write):
            os.close(fd)
        return CheckOutcome(False, False, failed.result.stderr, None, 0, 0, failed.result)
    if report is None:
        return CheckOutcome(False, True, None, None, 0, 0, sandbox)
    if sandbox.status == ERROR:
        return CheckOutcome(False, False, sandbox.stderr.strip()[-500:], None, 0, 0, sandbox)
    if "error" in report:
        return CheckOutcome(False, False, report["error"], None, 0, 0, sandbox)
    statements, completed = report["statements"], report["completed"]
    passed = report["failure"] is None and statements > 0 and completed == statements
    return CheckOutcome(passed, False, None, report["failure"], completed, statements, sandbox)
