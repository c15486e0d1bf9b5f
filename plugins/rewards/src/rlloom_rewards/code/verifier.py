"""Turning a response into a sandboxed program and its outcome into a verdict (for ``reward=code``,
see :mod:`rlloom_rewards.code.reward`). Torch-free, so that reward worker processes import it quickly."""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

from rlloom_tasks.rewards.verdict import Verdict

from rlloom_rewards.code.sandbox import ERROR, PASS, TIMEOUT, SandboxLimits, run_python
from rlloom_rewards.outcome import SampleTimeout

_FENCE = re.compile(r"```[ \t]*(?:[\w+-]+)?[ \t]*\n(.*?)```", re.DOTALL)


def extract_code(response: str) -> str:
    """The last fenced code block's content, or the whole response when there is none."""
    blocks = _FENCE.findall(response)
    return blocks[-1] if blocks else response


def build_program(response: str, tests: str, extra: dict[str, Any]) -> str:
    """The program of the module doc."""
    return f"{extra.get('prefix', '')}{extract_code(response)}\n\n{tests}\n\n{extra.get('suffix', '')}"


@dataclass(frozen=True)
class CodeVerifier:
    """Scores one row in the sandbox (picklable, for worker processes)."""

    limits: SandboxLimits
    python: str
    pass_score: float
    fail_score: float

    def __call__(self, response: str, tests: Any, extra: dict[str, Any]) -> Verdict:
        if not isinstance(tests, str):
            raise TypeError(
                f"the ground truth of reward=code must be test source code (str), got {type(tests).__name__}"
            )
        result = run_python(build_program(response, tests, extra or {}), self.limits, self.python)
        if result.status == TIMEOUT:
            raise SampleTimeout(f"the program ran longer than {self.limits.timeout_s} s")
        if result.status == ERROR:
            raise RuntimeError(f"the sandbox could not run the program: {result.stderr.strip()[-500:]}")
        passed = result.status == PASS
        return Verdict(self.pass_score if passed else self.fail_score, {"passed": float(passed)})
