"""What a model path given on the command line names: a run folder (its newest checkpoint), a
checkpoint (``.../checkpoints/global_step_<N>`` or the ``.../checkpoints/latest`` pointer) or a Hugging Face
model folder (``final_model``, an export); and the run config a checkpoint was trained with, as overrides.
A checkpoint that is not intact (:func:`rlloom_trainer.checkpoint.damage`) is refused, naming the damaged file."""

from __future__ import annotations

import argparse
import contextlib
import os
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass

from rlloom.config import ConfigError
from rlloom_trainer.checkpoint import (
    CHECKPOINTS_DIR, LATEST, MANIFEST, PREFIX, CheckpointError, CheckpointManager, verified_step,
)
from rlloom_trainer.config_files import hydra_value

RUN_CONFIG = "config.yaml"  # what every run folder holds from its start
# trainer keys a command sets itself, never taken from the run that wrote a checkpoint
OWN_TRAINER_KEYS = ("run_dir", "resume", "trackers")
# groups whose saved choice and settings a command does not take over: the model is the checkpoint's weights,
# the launcher is this process
NOT_TAKEN_OVER = ("model", "launcher")


@dataclass(frozen=True)
class Target:
    """``checkpoint``: a complete checkpoint folder (``step`` its step), or None; ``hf_folder``: a Hugging Face
    model folder, or None; exactly one is set. ``run_dir``: the run folder it belongs to, when known."""

    checkpoint: str | None
    hf_folder: str | None
    step: int
    run_dir: str | None

    @property
    def name(self) -> str:
        return os.path.basename(os.path.normpath(self.checkpoint or self.hf_folder or ""))


def resolve_target(path: str) -> Target:
    """The :class:`Target` ``path`` names; :class:`ConfigError` (one paragraph) when it names none."""
    path = os.path.abspath(os.path.expanduser(path))
    if os.path.isfile(path) and os.path.basename(path) == LATEST:  # checkpoints/latest holds a folder name
        with open(path, encoding="utf-8") as handle:
            path = os.path.join(os.path.dirname(path), handle.read().strip())
    if os.path.isfile(os.path.join(path, MANIFEST)) or os.path.basename(path).startswith(PREFIX):
        return Target(path, None, _intact_step(path), os.path.dirname(os.path.dirname(path)))
    if os.path.isdir(os.path.join(path, CHECKPOINTS_DIR)) or os.path.isfile(os.path.join(path, RUN_CONFIG)):
        folders = CheckpointManager(path).folders()
        if not folders:
            raise ConfigError(f"{path!r} is a run folder without a complete checkpoint; pass a Hugging Face model "
                              f"folder (e.g. its final_model) instead")
        newest = folders[-1]
        return Target(newest.path, None, _intact_step(newest.path, older=folders[:-1]), path)
    if os.path.isfile(os.path.join(path, "config.json")):
        return Target(None, path, 0, None)
    raise ConfigError(f"{path!r} is not a run folder, a checkpoint (checkpoints/global_step_<N>, checkpoints/latest) "
                      f"or a Hugging Face model folder (with config.json)")


def _intact_step(path: str, older: list = ()) -> int:
    """The step of the checkpoint ``path``; :class:`ConfigError` naming the damaged file when it is not intact
    (naming the next older checkpoint folder of ``older``, if any, to pass instead)."""
    try:
        return verified_step(path)
    except CheckpointError as error:
        instead = f"; pass an older checkpoint instead, e.g. {older[-1].path}" if older else ""
        raise ConfigError(f"{error}{instead}") from None


def add_model_arguments(parser: argparse.ArgumentParser, description: str) -> None:
    """Give ``parser`` (a command on a model: ``eval``, ``generate``, ``chat``) its ``description`` and the
    arguments those commands share: ``MODEL`` (a path for :func:`resolve_target`) and Hydra ``overrides``."""
    parser.description = description
    parser.add_argument("model", metavar="MODEL")
    parser.add_argument("overrides", nargs="*", help="Hydra overrides")


@contextlib.contextmanager
def model_folder(target: Target) -> Iterator[str]:
    """A Hugging Face folder holding ``target``'s policy: its own folder, or the checkpoint's actor exported
    (:func:`rlloom_trainer.export.export_checkpoint`) into a temporary folder removed afterwards."""
    if target.hf_folder is not None:
        yield target.hf_folder
        return
    from rlloom.controller.roles import quiet_transformers
    from rlloom_trainer.export import export_checkpoint
    from rlloom_trainer.progress import phase

    quiet_transformers()
    with tempfile.TemporaryDirectory(prefix="rlloom-model-") as tmp:
        with phase(f"loading {target.checkpoint}"):
            folder = export_checkpoint(target.checkpoint, os.path.join(tmp, "model"))
        yield folder


def saved_overrides(target: Target, overrides: list[str]) -> list[str]:
    """The overrides that rebuild the config ``target``'s checkpoint was trained with — every group choice and
    setting except the model and launcher (:data:`NOT_TAKEN_OVER`) and :data:`OWN_TRAINER_KEYS` — leaving out the
    settings of groups that ``overrides`` choose anew; none for a Hugging Face folder."""
    if target.checkpoint is None:
        return []
    from rlloom_trainer.run_state import TrainerState

    state = TrainerState.read(target.checkpoint)
    rechosen = {item.split("=", 1)[0] for item in overrides if "=" in item and "." not in item.split("=", 1)[0]}
    result = []
    for group, choice in state.choices.items():
        if group in NOT_TAKEN_OVER or group in rechosen or not choice:
            continue
        result.append(f"{group}={choice}")
    for section, values in state.config.items():
        if section in NOT_TAKEN_OVER or section in rechosen or not isinstance(values, dict):
            continue
        for key, value in values.items():
            if section == "trainer" and key in OWN_TRAINER_KEYS:
                continue
            result.append(f"{section}.{key}={hydra_value(value)}")
    return result
