"""``reward=python``: a user's own Python function scores the responses.

``reward.function`` names it as ``"package.module:function"`` (an importable module) or
``"/path/to/file.py:function"`` (a file, loaded as a module of its own; a relative path is taken
from the current directory). It is loaded when the config is composed, so a wrong name, a missing
file or a module that fails to import is a config error (exit 2) before anything heavy starts.

Two forms, told apart by the function's parameters. **One row at a time** (called once per
response)::

    def my_reward(response_text: str, ground_truth: Any, extra: dict) -> float | dict:
        ...

- ``response_text``: the decoded response; ``ground_truth`` and ``extra``: the prompt's
  ``PromptRecord.ground_truth`` and ``PromptRecord.extra`` (``{}`` when the batch has no ``extra``).

**TRL's form** (a parameter named ``completions``; called once per batch, keyword arguments, one
value per completion returned, as TRL's ``GRPOTrainer`` calls its reward functions)::

    def accuracy(completions: list[str], solution: list[str], **kwargs) -> list[float]:
        ...

- ``prompts`` (the prompts as the model saw them, chat template applied), ``completions`` (always
  plain text), ``completion_ids`` (the response's token ids), ``ground_truth``, ``data_source``, and
  every key of the rows' ``extra`` as a list (``None`` where a row lacks it): with ``data=files``
  each column named in ``data.extra_columns`` arrives under its own name. A function without
  ``**kwargs`` gets only the arguments it names; one that needs an argument the batch lacks is an
  error on every row, and the message lists what the batch has. TRL's ``trainer_state`` is not passed.

Either form returns a number (the score; ``bool`` counts as 0/1), or a dict with a ``"score"`` key
whose other keys are named components, each logged as ``reward/<name>/mean`` (TRL's form: a list of
them). A call that raises, or returns anything else (``None`` included), is an error: scored
``reward.error_score`` and counted in ``reward/errors`` (TRL's form: a call that raises is an error on
every row of its batch). ``reward.timeout_s`` and ``reward.num_workers`` work as for every row-scored
reward (:mod:`rlloom_rewardkit.runner`), the limit applying to one call (TRL's form: the whole batch,
in one worker). With ``num_workers >= 1`` the function is loaded again in every worker process, so it
must not rely on state set up by the trainer's process.
"""

from __future__ import annotations

from dataclasses import dataclass

from typing import TYPE_CHECKING, Any

from rlloom_rewardkit import ExecutionConfig, RowReward

from rlloom_rewards.user_function import (BatchedUserFunction, UserFunction, load_function, required_arguments,
                                          row_outcomes, takes_batches)

if TYPE_CHECKING:
    from rlloom import Batch, RewardResult

# Batch fields passed by name to a TRL-form function (the batch field each comes from).
TRL_ARGUMENTS = {"prompts": "prompt_text", "completions": "response_text", "ground_truth": "ground_truth",
                 "data_source": "data_source"}


@dataclass
class PythonRewardConfig(ExecutionConfig):
    """Options of ``reward=python`` (see the module doc)."""

    function: str = ""  # "package.module:function" or "/path/to/file.py:function"

    def __post_init__(self) -> None:
        super().__post_init__()
        load_function(self.function)  # ValueError / TypeError naming reward.function: a config error

    def check_other_sections(self, sections: dict[str, Any]) -> None:
        """ValueError when a TRL-form function requires an argument no batch will carry: neither one of
        :data:`TRL_ARGUMENTS` nor ``completion_ids`` nor a column the data section's ``extra_columns`` lists
        (checked only for a data section that declares ``extra_columns``, as ``data=files`` does)."""
        function = load_function(self.function)
        columns = getattr(sections.get("data"), "extra_columns", None)
        if columns is None or not takes_batches(function):
            return
        missing = [name for name in required_arguments(function)
                   if name not in {*TRL_ARGUMENTS, "completion_ids", *columns}]
        if missing:
            raise ValueError(
                f"reward.function={self.function!r} needs {missing}, which no batch will carry: a dataset column "
                f"reaches the function only when data.extra_columns lists it (now {list(columns)}), e.g. "
                f"data.extra_columns=[{','.join([*columns, *missing])}]; or give the parameter a default")


class PythonReward(RowReward):
    """See the module doc."""

    def __init__(self, cfg: PythonRewardConfig) -> None:
        self.batched = takes_batches(load_function(cfg.function))
        verify = BatchedUserFunction(cfg.function) if self.batched else UserFunction(cfg.function)
        super().__init__(verify, cfg, ("response_text", "ground_truth", "extra"), defaults={"extra": {}})

    def __call__(self, batch: Batch) -> RewardResult:
        if not self.batched:
            return super().__call__(batch)
        (outcome,) = self.scorer.outcomes(self.verify, [(trl_arguments(batch),)])
        return self.scorer.result(row_outcomes(outcome, len(batch)))


def trl_arguments(batch: Batch) -> dict[str, list[Any]]:
    """The keyword arguments of a TRL-form call on ``batch`` (see the module doc)."""
    batch.require("response_text")
    extras = batch["extra"] if "extra" in batch else [{}] * len(batch)
    arguments = {name: [extra.get(name) for extra in extras] for name in sorted({key for row in extras for key in row})}
    arguments |= {name: list(batch[field]) for name, field in TRL_ARGUMENTS.items() if field in batch}
    if "responses" in batch:
        kept = batch["response_attention_mask"] if "response_attention_mask" in batch else batch["response_mask"]
        arguments["completion_ids"] = [ids[mask.bool()].tolist() for ids, mask in zip(batch["responses"], kept)]
    return arguments
