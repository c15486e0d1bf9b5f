"""Test helper: ``rlloom serve`` as a child process (used by this package's tests and rlloom-sglang's)."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import threading
import time

RLLOOM = os.path.join(os.path.dirname(sys.executable), "rlloom")


class ServerProcess:
    """``rlloom serve *args --port 0`` as a child process; the constructor returns once it listens
    (``url``), or raises with its output."""

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
                # keep reading, or a chatty engine (vLLM logs) would block on a full pipe
                threading.Thread(target=self.process.stdout.read, daemon=True).start()
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
