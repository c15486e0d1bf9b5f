"""Starting an SGLang server for ``rollout=sglang``: the checks that say plainly why it cannot run
here, the command line, and the wait for ``/health``."""

from __future__ import annotations

import importlib.util
import socket
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request

from rlloom_sglang.config import SGLangRolloutConfig

INSTALL = "pip install 'sglang==0.5.23' (rlloom-sglang's extra sglang; on a machine with an NVIDIA GPU)"


def check_can_launch(cuda_available: bool) -> None:
    """ImportError naming the install command when SGLang is not importable; RuntimeError when it is
    but there is no CUDA GPU (SGLang's kernels have no build for ordinary CPUs)."""
    if importlib.util.find_spec("sglang") is None:
        raise ImportError(f"rollout=sglang needs SGLang, which is not installed: {INSTALL}. "
                          f"Or attach to a running SGLang server with rollout.url=http://HOST:PORT")
    if not cuda_available:
        raise RuntimeError("rollout=sglang: SGLang is installed but this machine has no CUDA GPU, and SGLang runs only "
                           "on GPUs. Use rollout=hf or rollout=vllm here, or attach to an SGLang server on a GPU "
                           "machine with rollout.url=http://HOST:PORT")


def free_port(host: str) -> int:
    with socket.socket() as sock:
        sock.bind((host, 0))
        return sock.getsockname()[1]


def launch_command(cfg: SGLangRolloutConfig, model_path: str, port: int, seed: int) -> list[str]:
    """``python -m sglang.launch_server …`` for ``cfg``."""
    command = [sys.executable, "-m", "sglang.launch_server", "--model-path", model_path, "--host", cfg.host,
               "--port", str(port), "--tp-size", str(cfg.tp_size), "--mem-fraction-static", str(cfg.mem_fraction_static),
               "--dtype", cfg.dtype, "--random-seed", str(seed), "--log-level", "warning"]
    if cfg.sleep_servers:
        command.append("--enable-memory-saver")
    return command + [str(arg) for arg in cfg.extra_args]


def wait_for_health(url: str, process: subprocess.Popen, log_path: str, timeout_s: float) -> None:
    """Return once ``url/health`` answers 200; RuntimeError with the log's tail when the process
    exits first or ``timeout_s`` passes."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise RuntimeError(f"the SGLang server exited with status {process.returncode}: {log_tail(log_path)}")
        try:
            with urllib.request.urlopen(url + "/health", timeout=5) as response:
                if response.status == 200:
                    return
        except (urllib.error.URLError, OSError):
            pass
        time.sleep(1.0)
    raise RuntimeError(f"the SGLang server at {url} did not answer /health within {timeout_s} s: {log_tail(log_path)}")


def log_tail(path: str, lines: int = 20) -> str:
    with open(path, errors="replace") as handle:
        return "".join(handle.readlines()[-lines:]).strip() or "(no output)"


def start_server(cfg: SGLangRolloutConfig, model_path: str, seed: int) -> tuple[subprocess.Popen, str, str]:
    """Launch the server; ``(process, url, log path)`` once it is healthy."""
    port = cfg.port or free_port(cfg.host)
    log = tempfile.NamedTemporaryFile(prefix="rlloom-sglang-", suffix=".log", delete=False)
    process = subprocess.Popen(launch_command(cfg, model_path, port, seed), stdout=log, stderr=subprocess.STDOUT)
    url = f"http://{cfg.host}:{port}"
    try:
        wait_for_health(url, process, log.name, cfg.startup_timeout_s)
    except BaseException:
        process.kill()
        raise
    return process, url, log.name
