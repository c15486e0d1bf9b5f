"""Starting a run (``rlloom train``, :func:`rlloom_trainer.train`): what the config and the filesystem alone refuse
is refused first, before torch loads and before the run folder exists (:func:`check_run`); then the checks that
need the trainer's modules, the run folder's lock (:mod:`.run_lock`), and the
:class:`~rlloom_trainer.trainer.Trainer` to the run's end.

Importing this module is as cheap as importing :mod:`rlloom`: the trainer's heavy modules load in :func:`fit_run`,
after :func:`check_run`.
"""

from __future__ import annotations

import os
import signal

from rlloom.config import ConfigError, ResolvedConfig, compose_config
from rlloom.config.run_name import run_dir_of
from rlloom.protocols import ChecksBeforeRun

from rlloom_trainer.agents import multi_turn
from rlloom_trainer.resume import check_resume_setting
from rlloom_trainer.run_lock import run_lock, unwritable
from rlloom_trainer.sigint import received_signal, recording_interrupts, retake_signals


def run_training(overrides: list[str]) -> dict[str, float]:
    """Compose and validate the config for ``overrides``, run it, return the final metrics."""
    return fit_run(compose_config(overrides))


def check_run_folder(run_dir: str) -> None:
    """ConfigError naming the run folder's key unless ``run_dir`` is a folder or can be made one: what is missing of
    it is made here and removed again (the run's lock makes it for good when the run starts)."""
    missing, path = [], os.path.abspath(run_dir)
    while not os.path.exists(path):
        missing.append(path)
        path = os.path.dirname(path)
    try:
        for folder in reversed(missing):
            os.mkdir(folder)
    except OSError as error:
        raise unwritable(run_dir, error) from None
    finally:
        for folder in missing:
            try:
                os.rmdir(folder)
            except OSError:
                pass


def check_run(resolved: ResolvedConfig) -> None:
    """ConfigError, naming the key, for what the config and the filesystem alone refuse, before torch loads: a
    multi-turn agent the launcher cannot run (:func:`~rlloom_trainer.agents.multi_turn`), ``trainer.resume``
    (:func:`~rlloom_trainer.resume.check_resume_setting`), a run folder that cannot be made, and what a section
    checks outside the config (:class:`~rlloom.protocols.ChecksBeforeRun`: a Ray cluster at ``launcher.address``
    must answer)."""
    trainer = resolved.sections["trainer"]
    multi_turn(resolved)
    check_resume_setting(trainer.resume, run_dir_of(trainer))
    check_run_folder(run_dir_of(trainer))
    for section in resolved.sections.values():
        if isinstance(section, ChecksBeforeRun):
            try:
                section.check_before_run()
            except (ValueError, ConnectionError) as error:
                raise ConfigError(str(error)) from None


def fit_run(resolved: ResolvedConfig) -> dict[str, float]:
    """Run the validated config ``resolved`` to its end; return the final metrics (those of the run's
    folder, building nothing, when that run has already finished: :func:`rlloom_trainer.resume.finished_run`).
    Ctrl-C or SIGTERM (:mod:`rlloom_trainer.sigint`) closes the run and raises
    :class:`~rlloom_trainer.interrupt.RunInterrupted` (the step it was in, the signal). The run holds its
    folder's lock throughout (:mod:`rlloom_trainer.run_lock`): a second run on the same folder is refused."""
    check_run(resolved)
    from rlloom_trainer.interrupt import RunInterrupted
    from rlloom_enginekit.lora import check_weight_sync

    from rlloom_trainer.local import check_one_process
    from rlloom_trainer.pipeline import check_async
    from rlloom_trainer.resume import finished_run
    from rlloom_trainer.trainer import Trainer

    check_async(resolved)  # an async mode the rest of the config cannot run is refused before the folder is made
    check_one_process(resolved)  # so is a train-engine layout of several processes under launcher=local
    check_weight_sync(resolved.sections, resolved.choices)  # and LoRA with a resharder or rollout that cannot sync it
    trainer = None
    with run_lock(run_dir_of(resolved.sections["trainer"])), recording_interrupts():
        try:
            finished = finished_run(resolved)
            if finished is not None:
                return finished
            trainer = Trainer(resolved)
            retake_signals()  # the launcher may have installed its own (Ray does, for SIGTERM)
            return trainer.fit()
        except KeyboardInterrupt:
            raise RunInterrupted(trainer.step if trainer else None, received_signal() or signal.SIGINT) from None
        finally:
            if trainer is not None:
                trainer.close()
