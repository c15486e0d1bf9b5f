"""Loading a user's reward function by name and calling it as a verifier (for ``reward=python``,
see :mod:`rlloom_rewards.python_fn`). Torch-free, so that reward worker processes import it quickly."""

from __future__ import annotations

import functools
import hashlib
import importlib
import importlib.util
import numbers
import os
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from rlloom_rewardkit.outcome import Verdict


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
