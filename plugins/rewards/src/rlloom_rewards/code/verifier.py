"""Turning a response into a sandboxed program and its outcome into a verdict (for ``reward=code``,
see :mod:`rlloom_rewards.code.reward`). Torch-free, so that reward worker processes import it quickly."""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

from rlloom_rewardkit.outcome import SampleTimeout, Verdict

from rlloom_rewards.code.harness import CheckJob, run_tests
from rlloom_rewards.code.sandbox import SandboxLimits

_FENCE = re.compile(r"```[ \t]*(?:[\w+-]+)?[ \t]*\n(.*?)```", re.DOTALL)


def extract_code(response: str) -> str:
    """The last fenced code block's content, or the whole response when there is none."""
    blocks = _FENCE.findall(response)
    return blocks[-1] if blocks else response


def build_job(response: str, tests: str, extra: dict[str, Any]) -> CheckJob:
    """The candidate (``extra["prefix"]`` + the response's code) and the tests of one row (see
    :mod:`rlloom_rewards.code.reward`)."""
    prefix = extra.get("prefix", "")
    return CheckJob(candidate=f"{prefix}{extract_code(response)}\n", tests=tests, prefix=prefix,
                   suffix=extra.get("suffix", ""), entry_point=extra.get("entry_point"))


@dataclass(frozen=True)
class CodeVerifier:
    """Scores one row: the candidate in the sandbox, the tests in a trusted process
    (:mod:`rlloom_rewards.code.harness`). Picklable, for worker processes."""

    limits: SandboxLimits
    python: str
    pass_score: float
    fail_score: float

    def __call__(self, response: str, tests: Any, extra: dict[str, Any]) -> Verdict:
        if not isinstance(tests, str):
            raise TypeError(
                f"the ground truth of reward=code must be test source code (str), got {type(tests).__name__}"
            )
        outcome = run_tests(build_job(response, tests, extra or {}), self.limits, self.python)
        if outcome.timed_out:
            raise SampleTimeout(f"the program ran longer than {self.limits.timeout_s} s")
        if outcome.error is not None:
            raise RuntimeError(f"the sandbox could not run the tests: {outcome.error}")
        return Verdict(self.pass_score if outcome.passed else self.fail_score, {"passed": float(outcome.passed)})
