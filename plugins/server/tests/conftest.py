"""Real ``rlloom serve`` processes for the tests (the hf engine on the tiny preset's model)."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import time

import pytest

RLLOOM = os.path.join(os.path.dirname(sys.executable), "rlloom")


class Server:
    """An ``rlloom serve`` child process; ``url`` once it listens."""

    def __init__(self, *args: str) -> None:
        env = dict(os.environ, OMP_NUM_THREADS="1")
        self.process = subprocess.Popen([RLLOOM, "serve", "--port", "0", *args], stdout=subprocess.PIPE,
                                        stderr=subprocess.STDOUT, text=True, env=env)
        self.url = None
        lines = []
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline:
            line = self.process.stdout.readline()
            if not line:
                break
            lines.append(line)
            match = re.search(r"on (http://\S+)", line)
            if match:
                self.url = match.group(1)
                return
        self.stop()
        raise RuntimeError("rlloom serve did not start:\n" + "".join(lines))

    def kill(self) -> None:
        self.process.kill()
        self.process.wait(30)

    def stop(self) -> None:
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
            try:
                self.process.wait(30)
            except subprocess.TimeoutExpired:
                self.kill()


@pytest.fixture(scope="session")
def model_cache(tmp_path_factory):
    return str(tmp_path_factory.mktemp("server_models"))


@pytest.fixture
def start_server(model_cache):
    """``start_server(*overrides_or_flags) -> Server`` on the tiny preset; all stopped after the test."""
    servers = []

    def start(*args: str) -> Server:
        server = Server("preset=tiny", f"model.cache_dir={model_cache}", *args)
        servers.append(server)
        return server

    yield start
    for server in servers:
        server.stop()
