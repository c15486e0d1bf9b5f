"""``reward=code``: run the response's code against the prompt's tests in the sandbox.

Per row, the program run by :func:`~rlloom_rewards.code.sandbox.run_python` is::

    extra["prefix"] + code + "\\n\\n" + ground_truth + "\\n\\n" + extra["suffix"]

- ``code``: the content of the last fenced block (```` ```python ... ``` ```` or ```` ``` ... ``` ````)
  of the response, or the whole response when it has none (a completion that continues the
  prompt);
- ``ground_truth``: the tests, Python source that raises (e.g. ``assert``) when the code is wrong;
- ``extra["prefix"]`` / ``extra["suffix"]`` (optional, ``""`` when absent): e.g. HumanEval's
  prompt (signature, imports) and ``check(<entry point>)``.

Sandbox outcome → row: ``pass`` → ``pass_score``; ``fail`` → ``fail_score``; ``timeout`` (the
program ran past ``timeout_s`` seconds of wall clock or CPU) → ``timeout_score``, counted in
``reward/timeouts``; ``error`` (the sandbox could not run it) → ``error_score``, counted in
``reward/errors``. Component ``passed`` (1.0/0.0). ``timeout_s`` is enforced by the sandbox (it kills
the program's process group), not by the row scorer; ``num_workers`` runs that many sandboxes at
once.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from rlloom_rewards.code.sandbox import SandboxLimits, sandbox_python
from rlloom_rewards.code.verifier import CodeVerifier
from rlloom_rewards.runner import ExecutionConfig, RowScorer, response_rows

if TYPE_CHECKING:  # annotations only: the plugin registers without torch
    from rlloom import Batch, RewardResult


@dataclass
class CodeRewardConfig(ExecutionConfig):
    """Options of ``reward=code`` (see the module doc and :class:`SandboxLimits`)."""

    timeout_s: float = 5.0  # wall clock per program (and ceil(timeout_s) s of CPU)
    memory_mb: int = 512
    file_size_mb: int = 16
    max_processes: int = 16
    python: str = ""  # interpreter for the programs; "" = this one (see sandbox_python)
    pass_score: float = 1.0
    fail_score: float = 0.0

    def __post_init__(self) -> None:
        super().__post_init__()
        if self.timeout_s <= 0:
            raise ValueError(
                f"reward.timeout_s must be > 0 for reward=code (the sandbox's wall clock), got {self.timeout_s}"
            )


class CodeReward:
    """See the module doc. The interpreter is checked when the reward is built."""

    def __init__(self, cfg: CodeRewardConfig) -> None:
        limits = SandboxLimits(cfg.timeout_s, cfg.memory_mb, cfg.file_size_mb, cfg.max_processes)
        self.verify = CodeVerifier(limits, sandbox_python(cfg.python), cfg.pass_score, cfg.fail_score)
        # The sandbox enforces timeout_s itself; the scorer must not cut it short.
        self.scorer = RowScorer(ExecutionConfig(cfg.num_workers, 0.0, cfg.error_score, cfg.timeout_score))

    def __call__(self, batch: Batch) -> RewardResult:
        rows = response_rows(batch, with_extra=True)
        return self.scorer.score(self.verify, rows)

    def close(self) -> None:
        self.scorer.close()
