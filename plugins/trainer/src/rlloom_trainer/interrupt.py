"""Ctrl-C (SIGINT) or SIGTERM during ``rlloom train``: the run stops where it is, its engines and trackers are
closed (``Trainer.close``: with ``launcher=ray`` the workers are shut down), and the command line prints one
line — the step it stopped in, the last complete checkpoint (or that there is none) and the command that
resumes — and exits with status 128 + the signal's number (130 for SIGINT, 143 for SIGTERM, as a shell reports
a process those signals killed), no traceback. A second signal while the run is being closed exits at once
(:mod:`rlloom_trainer.sigint`). Nothing is saved on the way out: a step cut in the middle has no consistent
state to save, and the re-run continues from the last complete checkpoint (every ``trainer.save_freq``
steps) exactly as if the run had never stopped.
"""

from __future__ import annotations

import shlex

from rlloom.config import ResolvedConfig
from rlloom.config.run_name import run_dir_of

from rlloom_trainer.checkpoint import CheckpointManager


class RunInterrupted(KeyboardInterrupt):
    """Ctrl-C or SIGTERM stopped a run: ``step`` is the step it was in (0: before the first; None: while it was
    being built), ``signum`` the signal."""

    def __init__(self, step: int | None, signum: int) -> None:
        super().__init__(step, signum)
        self.step, self.signum = step, signum

    @property
    def exit_status(self) -> int:
        """128 + the signal's number, as a shell reports a process the signal killed."""
        return 128 + self.signum


def interrupt_message(resolved: ResolvedConfig, step: int | None, command: list[str]) -> str:
    """The line to print when Ctrl-C or SIGTERM stopped the run of ``resolved`` in ``step`` (None: while it was being
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
