"""``data=reasoning_gym``: prompts from any reasoning-gym task.

The ``task`` generator (options ``task_config``, passed to
``reasoning_gym.create_dataset(task, size=..., seed=..., **task_config)``) is drawn from with seed
``2 * seed + 1`` for the validation split and ``2 * seed`` for the training split. Draws whose
question text was already taken (by val, or earlier in the same split) are skipped, so the splits
hold ``num_val`` and ``num_train`` distinct questions and share none. A task whose problem space
is too small for that raises ``ValueError`` after ``DRAWS_PER_QUESTION`` draws per question
asked for. Defaults: 100 val, 1000 train of ``basic_arithmetic``.

Each record: ``prompt = [{"role": "user", "content": question + instruction}]``,
``ground_truth`` the entry's ``answer``, ``data_source = "reasoning_gym/<task>"`` and
``extra = {"entry": entry, "task": task, "task_config": task_config}``, which is what
``reward=reasoning_gym`` scores with.
"""

from __future__ import annotations

import dataclasses
import difflib
from dataclasses import dataclass, field
from typing import Any

from rlloom.data import PromptRecord, Splits


DRAWS_PER_QUESTION = 10
RESERVED_OPTIONS = ("size", "seed")  # set from num_train/num_val and the run's seed


@dataclass
class ReasoningGymDataConfig:
    """Options of ``data=reasoning_gym`` (see the module doc)."""

    task: str = "basic_arithmetic"  # the reasoning-gym task (its dataset name)
    task_config: dict[str, Any] = field(default_factory=dict)  # the task generator's options
    num_train: int = 1000  # training questions
    num_val: int = 100  # validation questions (none shared with training)
    instruction: str = "\n\nGive only the final answer, between <answer> and </answer> tags."  # after each question


def _generator_class(task: str) -> tuple[type, type]:
    """reasoning-gym's (dataset class, config class) for ``task``; ``ValueError`` listing names if unknown."""
    from reasoning_gym.factory import DATASETS  # the registry of task names (slow import)

    if task not in DATASETS:
        names = sorted(DATASETS)
        close = difflib.get_close_matches(task, names, n=3)
        hint = f" Did you mean {', '.join(close)}?" if close else ""
        raise ValueError(f"data.task={task!r} is not a reasoning_gym task.{hint} Valid tasks: {', '.join(names)}")
    return DATASETS[task]


def _draw_distinct(cfg: ReasoningGymDataConfig, seed: int, count: int, taken: set[str]) -> list[dict[str, Any]]:
    """``count`` entries of ``cfg.task`` drawn with ``seed`` whose questions are not in ``taken``
    (which is updated)."""
    import reasoning_gym

    limit = DRAWS_PER_QUESTION * count
    try:
        generator = reasoning_gym.create_dataset(cfg.task, **cfg.task_config, size=max(limit, 1), seed=seed)
    except (TypeError, ValueError, AssertionError) as exc:  # unknown option / reasoning-gym's own validation
        _, config_class = _generator_class(cfg.task)
        valid = [f.name for f in dataclasses.fields(config_class) if f.name not in RESERVED_OPTIONS]
        raise ValueError(
            f"data.task_config={cfg.task_config} is rejected by reasoning_gym task {cfg.task!r} "
            f"({type(exc).__name__}: {exc}); its options are {valid}"
        ) from None
    entries = []
    for index in range(limit):
        if len(entries) == count:
            break
        entry = generator[index]
        if entry["question"] not in taken:
            taken.add(entry["question"])
            entries.append(entry)
    if len(entries) < count:
        raise ValueError(
            f"data=reasoning_gym: task {cfg.task!r} gave only {len(entries)} new distinct questions in "
            f"{limit} draws (seed {seed}), {count} were asked for; lower num_train/num_val or widen data.task_config"
        )
    return entries


def build_reasoning_gym(cfg: ReasoningGymDataConfig, seed: int) -> Splits:
    """The dataset of the module doc; ``ValueError`` names the offending config field."""
    _generator_class(cfg.task)
    reserved = sorted(set(cfg.task_config) & set(RESERVED_OPTIONS))
    if reserved:
        raise ValueError(f"data.task_config must not set {reserved}: use data.num_train/num_val and the run's seed")
    if cfg.num_train < 1 or cfg.num_val < 0:
        raise ValueError(f"data.num_train={cfg.num_train} must be >= 1 and data.num_val={cfg.num_val} >= 0")
    taken: set[str] = set()
    val = _draw_distinct(cfg, 2 * seed + 1, cfg.num_val, taken)
    train = _draw_distinct(cfg, 2 * seed, cfg.num_train, taken)

    def record(entry: dict[str, Any]) -> PromptRecord:
        return PromptRecord(
            prompt=[{"role": "user", "content": entry["question"] + cfg.instruction}],
            ground_truth=entry["answer"],
            data_source=f"reasoning_gym/{cfg.task}",
            extra={"entry": entry, "task": cfg.task, "task_config": dict(cfg.task_config)},
        )

    return Splits(train=[record(e) for e in train], val=[record(e) for e in val])
