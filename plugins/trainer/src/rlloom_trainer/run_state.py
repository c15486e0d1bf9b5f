"""What a resume restores besides the engines: the run's :class:`TrainerState` (its one owner: the
trainer writes it, resumes and the commands read it), RNG states, and whether the config still matches.

RNG states cover Python's ``random``, NumPy's global generator and torch's CPU generator (and the
CUDA generators when CUDA is initialised). Rollout sampling does not rely on them (every generate
call gets an explicit seed, see :class:`rlloom.controller.step.StepContext`); they are restored so
that anything else drawing from the global generators continues exactly.
"""

from __future__ import annotations

import dataclasses
import os
import random
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import torch

from rlloom_trainer.checkpoint import read_step
from rlloom_trainer.record import absolute_paths

TRAINER_STATE = "trainer_state.pt"
"""The file of a checkpoint folder that holds its :class:`TrainerState`."""


@dataclass
class TrainerState:
    """Everything a checkpoint holds besides the train engines' own files.

    - ``step``: training steps done; ``draws``: training-prompt batches drawn (a step may draw several);
    - ``data``: the prompt iterator's position (:meth:`rlloom_trainer.prompts.PromptIterator.state`);
    - ``nonfinite_in_a_row``: the non-finite guard's count (:class:`rlloom_trainer.guards.NonFiniteGuard`);
    - ``algorithm``: the algorithm's ``state_dict()`` (:class:`~rlloom.protocols.StatefulAlgorithm`), or None;
    - ``rng``: :func:`rng_state`;
    - ``choices`` (group → option) and ``config`` (the composed config, resolved, as plain dicts);
    - ``model_path``: the run's base model folder; ``optimizer_steps``: the LR schedules' length;
    - ``metrics``: the step's metrics (empty in checkpoints from before 2026-11-24);
    - ``streamed``: with ``trainer.stream_groups``, the uids of the prompts trained or dropped in the batches
      drawn after ``data`` (:mod:`rlloom_trainer.streaming`); else None.
    """

    step: int
    draws: int
    data: dict[str, Any]
    nonfinite_in_a_row: int
    algorithm: dict[str, Any] | None
    rng: dict[str, Any]
    choices: dict[str, str]
    config: dict[str, Any]
    model_path: str
    optimizer_steps: int
    metrics: dict[str, float] = field(default_factory=dict)
    streamed: list[str] | None = None

    def save(self, folder: str) -> None:
        """Write ``folder/trainer_state.pt`` (a plain dict of the fields, as every version wrote it)."""
        values = {item.name: getattr(self, item.name) for item in dataclasses.fields(self)}
        torch.save(values, os.path.join(folder, TRAINER_STATE))

    @classmethod
    def read(cls, folder: str) -> TrainerState:
        """The state of the complete checkpoint ``folder``
        (:class:`~rlloom_trainer.checkpoint.CheckpointError` when it is not one)."""
        read_step(folder)
        # Our own file, holding Python and NumPy RNG states (tuples, arrays): not a weights-only pickle.
        values = torch.load(os.path.join(folder, TRAINER_STATE), weights_only=False)
        return cls(**{item.name: values[item.name] for item in dataclasses.fields(cls) if item.name in values})

# Config keys that may change between a run and its resume: they do not change what the resumed
# steps compute (``trainer.total_steps`` moves the end; with a decaying LR schedule it also moves
# the schedule, which is the user's call; ``trainer.run_name`` and ``trainer.run_dir`` only say where
# the run lives, and checkpoints from before run names existed have none; ``launcher.*`` and
# ``train_engine.sequence_parallel_size`` place the same computation on other processes, the same
# numbers up to the order of float sums; ``train_engine.tensor_parallel_size`` is train_engine=megatron's
# layout, which its checkpoints do not depend on: a TP = 2 run resumes at TP = 1 and back). ``*`` matches
# any key of a section.
RESUMABLE_CHANGES = (
    "trainer.total_steps", "trainer.trackers", "trainer.test_freq", "trainer.save_freq", "trainer.keep_last_n",
    "trainer.resume", "trainer.run_dir", "trainer.run_name", "trainer.dump_rollouts", "trainer.max_nonfinite_steps",
    "trainer.save_final_model", "trainer.val_before_train", "launcher.*", "model.cache_dir",
    "train_engine.sequence_parallel_size", "train_engine.tensor_parallel_size",
)


def rng_state() -> dict[str, Any]:
    state = {"python": random.getstate(), "numpy": np.random.get_state(), "torch": torch.get_rng_state()}
    if torch.cuda.is_available() and torch.cuda.is_initialized():
        state["cuda"] = torch.cuda.get_rng_state_all()
    return state


def set_rng_state(state: dict[str, Any]) -> None:
    random.setstate(state["python"])
    np.random.set_state(state["numpy"])
    torch.set_rng_state(state["torch"])
    if "cuda" in state and torch.cuda.is_available():
        torch.cuda.set_rng_state_all(state["cuda"])


def flatten_config(node: dict[str, Any], prefix: str = "") -> dict[str, Any]:
    """Nested dicts as ``{"section.key": value}`` (lists stay values)."""
    flat: dict[str, Any] = {}
    for key, value in node.items():
        if isinstance(value, dict):
            flat.update(flatten_config(value, f"{prefix}{key}."))
        else:
            flat[f"{prefix}{key}"] = value
    return flat


def _resumable(key: str) -> bool:
    return any(key == allowed or (allowed.endswith(".*") and key.startswith(allowed[:-1]))
               for allowed in RESUMABLE_CHANGES)


def config_changes(saved: dict[str, Any], current: dict[str, Any]) -> list[str]:
    """``"key: old -> new"`` for every config value that differs between the checkpoint's config and
    the current one, except the keys in :data:`RESUMABLE_CHANGES`; sorted by key. Local paths compare as
    absolute paths (:func:`~rlloom_trainer.record.absolute_paths`: how the run records them), so a resume typed
    with relative paths, or from the run's recorded config, is no change."""
    old, new = flatten_config(absolute_paths(saved)), flatten_config(absolute_paths(current))
    return [
        f"{key}: {old.get(key, '<absent>')!r} -> {new.get(key, '<absent>')!r}"
        for key in sorted(set(old) | set(new))
        if old.get(key, "<absent>") != new.get(key, "<absent>") and not _resumable(key)
    ]
