"""Ctrl-C (SIGINT) during ``rlloom train``: the run stops where it is, its engines and trackers are closed
(``Trainer.close``: with ``launcher=ray`` the workers are shut down), and the command line prints one line —
the step it stopped in, the last complete checkpoint (or that there is none) and the command that resumes —
and exits with status 130 (128 + SIGINT), no traceback. Nothing is saved on the way out: a step cut in
the middle has no consistent state to save, and the re-run continues from the last complete checkpoint
(every ``trainer.save_freq`` steps) exactly as if the run had never stopped.
"""

from __future__ import annotations

import shlex

from rlloom.config import ResolvedConfig
from rlloom.config.run_name import run_dir_of

from rlloom_trainer.checkpoint import CheckpointManager


class RunInterrupted(KeyboardInterrupt):
    """Ctrl-C stopped a run that was built: ``step`` is the step it was in (0: before the first)."""

    def __init__(self, step: int) -> None:
        super().__init__(step)
        self.step = step


def interrupt_message(resolved: ResolvedConfig, step: int | None, command: list[str]) -> str:
    """The line to print when Ctrl-C stopped the run of ``resolved`` in ``step`` (None: while it was being
    built), ``command`` being the command line that started it."""
    trainer = resolved.sections["trainer"]
    run_dir = run_dir_of(trainer)
    if step is None:
        where = "while starting"
    elif step == 0:
        where = "before step 1"
    else:
        where = f"in step {step}/{trainer.total_steps}"
    latest = CheckpointManager(run_dir).latest()
    if latest is None:
        return (f"rlloom: interrupted {where} of run {trainer.run_name} ({run_dir}); no complete checkpoint yet "
                f"(trainer.save_freq={trainer.save_freq}), so re-running starts over: {shlex.join(command)}")
    if trainer.resume != "auto":
        command = [*command, "trainer.resume=auto"]
    return (f"rlloom: interrupted {where} of run {trainer.run_name}; last complete checkpoint: {latest.path} "
            f"(step {latest.step}); to resume from it run: {shlex.join(command)}")
