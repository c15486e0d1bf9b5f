"""What a run (re-)started in a folder continues from: the checkpoint ``trainer.resume`` points at,
checked against the current config, and whether the run in that folder has already finished.

``trainer.resume``: ``auto`` (the default) continues from the folder's newest intact checkpoint, skipping
(and naming on stderr) damaged ones (:meth:`~rlloom_trainer.checkpoint.CheckpointManager.newest_intact`);
``never`` starts fresh, and is a config error when the folder already holds checkpoints (a run is never
overwritten: choose another ``trainer.run_name`` or ``trainer.run_dir``); a checkpoint folder continues from
that checkpoint, which must be intact.
"""

from __future__ import annotations

import json
import os
import sys

from omegaconf import OmegaConf
from rlloom.config import ConfigError, ResolvedConfig
from rlloom.config.run_name import run_dir_of
from rlloom.config.schema import DEFAULT_CHOICES, NO_ROLE

from rlloom_trainer.checkpoint import Checkpoint, CheckpointError, CheckpointManager, check_folder, verified_step

FINAL_METRICS = "final_metrics.json"


def without_unused_roles(choices: dict[str, str]) -> dict[str, str]:
    """``choices`` less the declared-role groups left ``none``: a run without such a role is the same
    run whether or not an installed algorithm declares the group (and checkpoints from before a group
    existed lack it)."""
    return {group: choice for group, choice in choices.items() if group in DEFAULT_CHOICES or choice != NO_ROLE}


def _refused(mode: str, error: CheckpointError) -> ConfigError:
    return ConfigError(f"trainer.resume={mode}: {error}; expected auto, never or a checkpoint folder.")


def check_resume_setting(mode: str, run_dir: str) -> None:
    """ConfigError for what ``trainer.resume`` (``mode``) asks that the files alone refuse, read-only and before
    torch loads: ``never`` when ``run_dir`` holds checkpoints, a checkpoint that is no folder. Whether a
    checkpoint is intact and was written with a compatible config is checked when the run starts, under the
    folder's lock (:func:`resume_target`)."""
    if mode == "never":
        existing = CheckpointManager(run_dir).latest()
        if existing is not None:
            raise ConfigError(
                f"trainer.resume=never but trainer.run_dir={run_dir} already holds checkpoints ({existing.path}); "
                f"use trainer.resume=auto to continue that run, or start a new one with another trainer.run_name "
                f"or trainer.run_dir."
            )
    elif mode != "auto":
        try:
            check_folder(mode)
        except CheckpointError as error:
            raise _refused(mode, error) from None


def resume_target(resolved: ResolvedConfig, run_dir: str) -> Checkpoint | None:
    """The checkpoint ``trainer.resume`` points at for a run in ``run_dir``, or None for a fresh start.
    ConfigError for the refusals of :func:`check_resume_setting`, when ``resume`` names no intact
    checkpoint, or when the checkpoint's config differs in a key that cannot change on resume
    (:func:`rlloom_trainer.run_state.config_changes`)."""
    mode = resolved.sections["trainer"].resume
    check_resume_setting(mode, run_dir)
    if mode == "never":
        return None
    if mode == "auto":
        target = CheckpointManager(run_dir).newest_intact()
    else:
        try:
            target = Checkpoint(mode, verified_step(mode))
        except CheckpointError as error:
            raise _refused(mode, error) from None
    if target is not None:
        from rlloom_trainer.run_state import TrainerState, config_changes  # torch: after check_resume_setting

        saved = TrainerState.read(target.path)
        changes = config_changes({"choices": without_unused_roles(saved.choices), **saved.config},
                                 {"choices": without_unused_roles(resolved.choices),
                                  **OmegaConf.to_container(resolved.cfg, resolve=True)})
        if changes:
            raise ConfigError(
                f"trainer.resume={mode}: the checkpoint {target.path} was written with a different config and "
                f"these settings cannot change when resuming: {'; '.join(changes)}. Restore them, or start a "
                f"new run with another trainer.run_name (or trainer.run_dir)."
            )
    return target


def finished_run(resolved: ResolvedConfig) -> dict[str, float] | None:
    """With ``trainer.resume=auto``, when the run's folder holds a checkpoint at or past
    ``trainer.total_steps`` and the run's final metrics (the run ended): say so on stderr, with what
    to change to train longer or start over, and return those final metrics without building
    anything. None otherwise (also when the end was cut off: the trainer then finishes it). A
    config that differs from the finished run's is a ConfigError, as for any resume."""
    trainer = resolved.sections["trainer"]
    run_dir = run_dir_of(trainer)
    final = os.path.join(run_dir, FINAL_METRICS)
    if trainer.resume != "auto" or not os.path.isfile(final):
        return None
    latest = CheckpointManager(run_dir).latest()
    if latest is None or latest.step < trainer.total_steps:
        return None
    resume_target(resolved, run_dir)
    start_over = "another trainer.run_dir" if trainer.run_dir else "trainer.run_name=<new> or another trainer.run_dir"
    print(f"rlloom: run {trainer.run_name} already finished {latest.step}/{trainer.total_steps} steps in {run_dir}; "
          f"to train longer raise trainer.total_steps, to start over pass {start_over}", file=sys.stderr, flush=True)
    with open(final, encoding="utf-8") as handle:
        return json.load(handle)
