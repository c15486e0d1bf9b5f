"""Loading a user's reward function by name and calling it, one row at a time or, in TRL's form, once
per batch (for ``reward=python``, see :mod:`rlloom_rewards.python_fn`). Torch-free, so that reward
worker processes import it quickly."""

from __future__ import annotations

import functools
import hashlib
import importlib
import importlib.util
import inspect
import numbers
import os
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from rlloom_rewardkit.outcome import ERROR, OK, Outcome, Verdict, describe


@functools.cache
def load_function(spec: str) -> Callable[..., Any]:
    """The callable ``spec`` names (see the module doc); ``ValueError`` says what is wrong with it.

    Cached per process: a file is executed once, so module-level state lives as long as the process.
    """
    target, sep, name = spec.rpartition(":")
    if not sep or not target or not name.isidentifier():
        raise ValueError(
            f"reward.function={spec!r} must be 'package.module:function' or '/path/to/file.py:function'"
        )
    if target.endswith(".py") or os.sep in target:
        path = os.path.abspath(target)
        if not os.path.isfile(path):
            raise ValueError(f"reward.function={spec!r}: no such file {path}")
        module_name = "rlloom_user_reward_" + hashlib.sha256(path.encode()).hexdigest()[:12]
        module_spec = importlib.util.spec_from_file_location(module_name, path)
        module = importlib.util.module_from_spec(module_spec)
        try:
            module_spec.loader.exec_module(module)
        except Exception as exc:
            raise ValueError(f"reward.function={spec!r}: loading {path} failed: {type(exc).__name__}: {exc}") from exc
    else:
        try:
            module = importlib.import_module(target)
        except ImportError as exc:
            raise ValueError(f"reward.function={spec!r}: cannot import module {target!r}: {exc}") from exc
    if not hasattr(module, name):
        raise ValueError(f"reward.function={spec!r}: {target} has no function {name!r}")
    function = getattr(module, name)
    if not callable(function):
        raise TypeError(f"reward.function={spec!r}: {target}.{name} is a {type(function).__name__}, not a function")
    return function


def as_verdict(value: Any) -> Verdict:
    """A user function's return value (number or dict with ``"score"``) as a :class:`Verdict`."""
    if isinstance(value, dict):
        if "score" not in value:
            raise ValueError(f"the reward function returned a dict without a 'score' key: keys {sorted(value)}")
        components = {name: float(v) for name, v in value.items() if name != "score"}
        return Verdict(float(value["score"]), components)
    if isinstance(value, numbers.Real):
        return Verdict(float(value))
    raise TypeError(f"the reward function returned {type(value).__name__}; expected a number or a dict")


@dataclass(frozen=True)
class UserFunction:
    """A picklable verifier calling the function ``spec`` names (loaded on first use per process)."""

    spec: str

    def __call__(self, response: str, ground_truth: Any, extra: dict[str, Any]) -> Verdict:
        return as_verdict(load_function(self.spec)(response, ground_truth, extra))


def takes_batches(function: Callable[..., Any]) -> bool:
    """Whether ``function`` has TRL's reward-function form: a parameter named ``completions``."""
    return "completions" in inspect.signature(function).parameters


def required_arguments(function: Callable[..., Any]) -> list[str]:
    """The names of ``function``'s parameters that have no default (``*args`` / ``**kwargs`` aside)."""
    parameters = inspect.signature(function).parameters.values()
    return [parameter.name for parameter in parameters if parameter.default is parameter.empty
            and parameter.kind not in (parameter.VAR_POSITIONAL, parameter.VAR_KEYWORD)]


@dataclass(frozen=True)
class BatchedUserFunction:
    """A picklable call of the TRL-form function ``spec`` on a whole batch's keyword arguments.

    The function gets the arguments its signature names (all of them when it takes ``**kwargs``) and
    returns one value per completion; a required parameter the batch lacks, or a result of another
    length, raises (and so scores every row as an error)."""

    spec: str

    def __call__(self, arguments: dict[str, list]) -> list[Any]:
        function = load_function(self.spec)
        parameters = inspect.signature(function).parameters.values()
        if not any(parameter.kind is parameter.VAR_KEYWORD for parameter in parameters):
            names = {parameter.name for parameter in parameters}
            arguments = {name: value for name, value in arguments.items() if name in names}
        missing = [name for name in required_arguments(function) if name not in arguments]
        if missing:
            raise TypeError(f"the reward function needs {missing}, which the batch does not have (it has "
                            f"{sorted(arguments)}; a dataset column arrives by its name when data.extra_columns "
                            "lists it)")
        values = list(function(**arguments))
        if len(values) != len(arguments["completions"]):
            raise ValueError(f"the reward function returned {len(values)} values for "
                             f"{len(arguments['completions'])} completions")
        return values


def row_outcomes(outcome: Outcome, rows: int) -> list[Outcome]:
    """Per-row outcomes of one batched call: its error or timeout on every row, else each returned value as
    a verdict (``None``, TRL's "no reward applies", and a value :func:`as_verdict` refuses are errors)."""
    if outcome.status != OK:
        return [outcome] * rows
    outcomes = []
    for value in outcome.value:
        try:
            if value is None:
                raise ValueError("the reward function returned None for this completion")
            outcomes.append(Outcome(OK, as_verdict(value)))
        except (TypeError, ValueError) as exc:
            outcomes.append(Outcome(ERROR, message=describe(exc)))
    return outcomes
