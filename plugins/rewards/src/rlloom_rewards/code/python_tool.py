"""The tool ``python`` (``agent.tools=[python]``): the model's program runs in the code reward's sandbox
(:mod:`rlloom_rewards.code.sandbox`, docs/sandbox.md) and the model sees what it printed.

Arguments ``{"code": str}``: a program run as ``__main__`` with the standard library only, no network
and none of the host's files, within the limits of :class:`PythonToolConfig`
(``+agent.tool_settings.python.<key>=...``). The observation is the program's stdout (``(no output)``
when it printed nothing), then ``stderr:`` and its stderr's tail when it wrote any. A program that does
not exit with status 0 — an exception, an operation the sandbox refused, a resource limit, the wall
clock (``timeout_s``) — gets ``error: <how it ended>`` and the same output, so the toolbox counts it
in ``tool_errors``; a sandbox that cannot start raises (the toolbox's error observation). The run goes
on either way.

A run blocks a thread while it waits for its child process, never the event loop: runs go to the tool's
own ``max_concurrent`` threads (also a bound on the sandboxes alive at once: every run's program is
the user ``nobody``, whose process count ``max_processes`` caps across runs). A call waiting for a
thread waits within the toolbox's ``agent.tool_timeout_s``; one abandoned before it started never runs.
"""

from __future__ import annotations

import asyncio
import signal
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any, ClassVar

from rlloom.config.limits import Limited
from rlloom.data import PromptRecord

from rlloom_rewards.code.sandbox import ERROR, PASS, TIMEOUT, SandboxConfig, SandboxResult, run_python

SECTION = "agent.tool_settings.python"


@dataclass
class PythonToolConfig(SandboxConfig, Limited):
    """Settings of the tool ``python``: the sandbox's (:class:`~rlloom_rewards.code.sandbox.SandboxConfig`)
    and ``max_concurrent``, the programs running at once."""

    section: ClassVar[str] = SECTION
    limits: ClassVar[dict[str, str]] = {
        "timeout_s": "in (0, inf)", "memory_mb": ">= 1", "file_size_mb": ">= 1", "max_processes": ">= 1",
        "disk_mb": ">= 1", "max_concurrent": ">= 1",
    }

    max_concurrent: int = 4  # programs running at once (one thread each)


def signal_name(number: int) -> str:
    """``SIGKILL`` for 9; ``signal 40`` for a number without a name."""
    try:
        return signal.Signals(number).name
    except ValueError:
        return f"signal {number}"


def observation(result: SandboxResult, timeout_s: float) -> str:
    """What the model sees of a finished run (see the module doc)."""
    if result.status == ERROR:
        raise RuntimeError(f"the sandbox could not run the program: {result.stderr.strip()}")
    shown = result.stdout or "(no output)"
    if result.stderr:
        shown += f"\nstderr:\n{result.stderr}"
    if result.status == PASS:
        return shown
    if result.status == TIMEOUT:
        ending = f"the program ran past its limit of {timeout_s:g} s and was stopped"
    elif result.returncode is not None and result.returncode < 0:
        ending = f"the program was killed by {signal_name(-result.returncode)}"
    else:
        ending = f"the program exited with status {result.returncode}"
    return f"error: {ending}\n{shown}"


class PythonTool:
    """The tool of the module doc (:class:`~rlloom.protocols.Tool`). Building it checks the interpreter
    and, without root, refuses unless ``allow_unsandboxed``
    (:meth:`~rlloom_rewards.code.sandbox.SandboxConfig.contained_python`)."""

    name = "python"
    description = ("Run a Python program (standard library only, no network, no files) and see what it "
                   "prints: print every value you need.")
    parameters: dict[str, Any] = {
        "type": "object",
        "properties": {"code": {"type": "string", "description": "the Python program to run"}},
        "required": ["code"],
    }

    def __init__(self, cfg: PythonToolConfig) -> None:
        self.limits = cfg.sandbox_limits()
        self.python = cfg.contained_python("the tool python", SECTION)
        self.workers = ThreadPoolExecutor(cfg.max_concurrent, thread_name_prefix="rlloom-python-tool")

    async def __call__(self, arguments: dict[str, Any], row: PromptRecord) -> str:
        run = asyncio.get_running_loop().run_in_executor(
            self.workers, run_python, arguments["code"], self.limits, self.python)
        return observation(await run, self.limits.timeout_s)
