"""``reward=code``: run the response's code against the prompt's tests in the sandbox.

Per row (:mod:`~rlloom_rewards.code.harness`), the candidate program::

    extra["prefix"] + code

runs in the sandbox, and the tests::

    ground_truth + "\n" + extra["suffix"]

run in a separate trusted process that calls the candidate's functions and compares what they return
(plain data only) itself; the row passes only when that process reports every test statement done.

- ``code``: the content of the last fenced block (```` ```python ... ``` ```` or ```` ``` ... ``` ````)
  of the response, or the whole response when it has none (a completion that continues the
  prompt);
- ``ground_truth``: the tests, Python source that raises (e.g. ``assert``) when the code is wrong, calling
  the functions the response defines by name (the entry point, or names neither the prefix nor the tests
  define; builtins are always the real ones);
- ``extra["prefix"]`` / ``extra["suffix"]`` / ``extra["entry_point"]`` (optional): e.g. HumanEval's
  prompt (signature, imports, helpers: the tests use the prompt's own helpers, never the response's),
  ``check(<entry point>)`` and the entry point's name.

Outcome → row: every test passed → ``pass_score``; a test failed (or the program never got to answer)
→ ``fail_score``; ``timeout`` (the exchange ran past ``timeout_s`` seconds of wall clock, or the program
past its CPU limit) → ``timeout_score``, counted in ``reward/timeouts``; ``error`` (the sandbox could not
run it, or the task's own code is broken) → ``error_score``, counted in ``reward/errors``. Component
``passed`` (1.0/0.0). ``timeout_s`` is enforced by the sandbox (it kills
the program's process group), not by the row scorer; ``num_workers`` runs that many sandboxes at
once.
"""

from __future__ import annotations

from dataclasses import dataclass

from rlloom_rewardkit import ExecutionConfig, RowReward

from rlloom_rewards.code.sandbox import SandboxConfig
from rlloom_rewards.code.verifier import CodeVerifier


@dataclass
class CodeRewardConfig(ExecutionConfig, SandboxConfig):
    """Options of ``reward=code`` (see the module doc): how rows are scored (``ExecutionConfig``: the
    sandbox enforces ``timeout_s`` itself, per program) and the sandbox's settings
    (:class:`~rlloom_rewards.code.sandbox.SandboxConfig`)."""

    timeout_s: float = 5.0  # wall clock per program (and ceil(timeout_s) s of CPU)
    pass_score: float = 1.0  # every test passed
    fail_score: float = 0.0  # a test failed, or the program never answered

    def __post_init__(self) -> None:
        super().__post_init__()
        if self.timeout_s <= 0:
            raise ValueError(
                f"reward.timeout_s must be > 0 for reward=code (the sandbox's wall clock), got {self.timeout_s}"
            )


class CodeReward(RowReward):
    """See the module doc. The interpreter is checked when the reward is built; without root it refuses
    to build unless ``allow_unsandboxed`` (then it warns)."""

    def __init__(self, cfg: CodeRewardConfig) -> None:
        python = cfg.contained_python("reward=code", "reward")
        verify = CodeVerifier(cfg.sandbox_limits(), python, cfg.pass_score, cfg.fail_score)
        # The sandbox enforces timeout_s itself; the scorer must not cut it short.
        execution = ExecutionConfig(cfg.num_workers, 0.0, cfg.error_score, cfg.timeout_score)
        super().__init__(verify, execution, ("response_text", "ground_truth", "extra"), defaults={"extra": {}})
