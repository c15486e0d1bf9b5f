"""``launcher.address``: a run attaches to a Ray cluster started outside it (``ray start --head``),
gives the local launcher's metrics, and leaves that cluster running.

The head and the run are subprocesses, so this process's own Ray state is untouched; only the
head started here is stopped (no ``ray stop``, which would stop every Ray on the machine)."""

from __future__ import annotations

import os
import re
import secrets
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest
import torch
from rlloom_trainer.testing import comparable_rows, metric_rows

pytest.importorskip("ray")

RAY = Path(sys.executable).parent / "ray"
STEPS = 2


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def ray_env(token: str) -> dict[str, str]:
    """The environment of the head and of every client: token authentication (Ray 2.60's default for
    new clusters) with this test's own token, no usage stats, no fault injection, one thread."""
    env = {key: value for key, value in os.environ.items() if not key.startswith(("RLLOOM_", "RAY_"))}
    env.update(RAY_USAGE_STATS_ENABLED="0", RAY_AUTH_MODE="token", RAY_AUTH_TOKEN=token, OMP_NUM_THREADS="1")
    return env


def session_members(session: int) -> list[int]:
    """Live processes of the session ``session``. A head started in its own session keeps every
    process it starts there (Ray workers retitle themselves ``ray::...``, so their command lines
    cannot be matched; their session can)."""
    found = []
    for entry in os.listdir("/proc"):
        try:
            with open(f"/proc/{entry}/stat", encoding="utf-8") as handle:
                state, _, _, sid = handle.read().rsplit(")", 1)[1].split()[:4]
        except (OSError, ValueError):
            continue
        if int(sid) == session and state != "Z":
            found.append(int(entry))
    return found


def status(address: str, env: dict[str, str]) -> subprocess.CompletedProcess:
    return subprocess.run([str(RAY), "status", f"--address={address}"], env=env, capture_output=True, text=True,
                          timeout=60)


class Head:
    """A Ray head node of 2 CPUs, run by ``ray start --block`` in its own session."""

    def __init__(self) -> None:
        self.port = free_port()
        self.address = f"127.0.0.1:{self.port}"
        # Short: Ray puts Unix sockets under it (108-byte path limit).
        self.temp_dir = tempfile.mkdtemp(prefix="rlloom-head-", dir="/tmp")
        self.env = ray_env(secrets.token_hex(32))
        self.log = open(os.path.join(self.temp_dir, "head.log"), "w")
        self.process = subprocess.Popen(
            [str(RAY), "start", "--head", "--block", f"--port={self.port}", "--num-cpus=2",
             "--include-dashboard=false", "--disable-usage-stats", f"--temp-dir={self.temp_dir}"],
            env=self.env, stdout=self.log, stderr=subprocess.STDOUT, start_new_session=True,
        )

    def wait_ready(self) -> None:
        """Until ``ray status`` reaches the head, however long its start-up takes on a loaded machine; a head
        that exits first is an error (one that never answers runs into pytest's timeout)."""
        while status(self.address, self.env).returncode != 0:
            if self.process.poll() is not None:
                raise RuntimeError(f"the Ray head at {self.address} exited before it answered; see {self.log.name}")
            time.sleep(0.5)

    def stop(self) -> None:
        """SIGTERM to ``ray start --block`` (it drains the node and stops what it started); SIGKILL to
        whatever of its session is left after 60 s."""
        self.process.send_signal(signal.SIGTERM)
        try:
            self.process.wait(timeout=60)
        except subprocess.TimeoutExpired:
            pass
        deadline = time.monotonic() + 30
        while session_members(self.process.pid) and time.monotonic() < deadline:
            time.sleep(0.5)
        for pid in session_members(self.process.pid):
            os.kill(pid, signal.SIGKILL)
        self.process.wait(timeout=10)
        self.log.close()


@pytest.fixture
def head():
    head = Head()
    try:
        head.wait_ready()
        yield head
    finally:
        head.stop()
    assert session_members(head.process.pid) == []  # the head and everything it started are gone
    shutil.rmtree(head.temp_dir, ignore_errors=True)


def usage_released(head: Head, wait_s: float = 15.0) -> bool:
    """Whether the head is up (``ray status`` succeeds) and reports all 2 CPUs free within ``wait_s`` seconds of
    Ray's reporting lag: the time counted is the waits between two asks, not the start-up of each ``ray status``
    (a new process, seconds on a loaded machine)."""
    waited = 0.0
    while True:
        result = status(head.address, head.env)
        if result.returncode == 0 and re.search(r"^\s*0\.0/2\.0 CPU\s*$", result.stdout, re.MULTILINE):
            return True
        if waited > wait_s:
            return False
        time.sleep(0.5)
        waited += 0.5


@pytest.mark.slow
def test_run_attaches_to_a_running_cluster_and_leaves_it_running(head, cache, local_rows, tmp_path):
    torch.set_num_threads(1)
    run_dir = tmp_path / "ray"
    overrides = ["preset=tiny", f"trainer.total_steps={STEPS}", f"trainer.run_dir={run_dir}",
                 f"model.cache_dir={cache}", "trainer.trackers=[jsonl]", "launcher=ray",
                 f"launcher.address={head.address}"]
    driver = subprocess.Popen([sys.executable, "-c", f"import rlloom_trainer; rlloom_trainer.train({overrides!r})"],
                              env=head.env, cwd=tmp_path, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    output, _ = driver.communicate(timeout=300)
    assert driver.returncode == 0, output[-3000:]
    attached = rf"Connecting to existing Ray cluster at address: [\d.]+:{head.port}\.\.\."
    assert re.search(attached, output) and "Started a local Ray instance" not in output, output[-3000:]
    # The driver's core log lies in the head's session: it ran on that cluster, not on another one.
    logs = Path(head.temp_dir, "session_latest", "logs")
    assert list(logs.glob(f"python-core-driver-*_{driver.pid}.log")), sorted(p.name for p in logs.iterdir())

    # The cluster outlives the run, and the run gave back every CPU it reserved.
    assert usage_released(head)
    assert head.process.poll() is None

    # Colocated on one worker process, same seed and one thread: bit-equal to the local launcher's run of
    # conftest.py (as test_ray_launcher's colocated run).
    rows = metric_rows(str(run_dir))
    assert [row["step"] for row in rows] == list(range(STEPS + 1))
    assert comparable_rows(rows) == comparable_rows(local_rows)
