"""``reward=python``: loading a user function by dotted path or file path, and what it may return."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from rlloom import Batch
from rlloom_rewards.python_fn import PythonReward, PythonRewardConfig
from rlloom_rewards.user_function import as_verdict, load_function

FNS = Path(__file__).with_name("rewards_testfns.py")


def test_dotted_path(tmp_path, monkeypatch):
    (tmp_path / "my_rewards_pkg").mkdir()
    (tmp_path / "my_rewards_pkg" / "__init__.py").write_text("")
    (tmp_path / "my_rewards_pkg" / "scores.py").write_text(
        "def exact(response, ground_truth, extra):\n    return response.strip() == ground_truth\n"
    )
    monkeypatch.syspath_prepend(str(tmp_path))
    reward = PythonReward(PythonRewardConfig(function="my_rewards_pkg.scores:exact"))
    batch = Batch(objects={"response_text": [" 7 ", "8"], "ground_truth": ["7", "7"]})
    assert reward(batch).scores.tolist() == [1.0, 0.0]


def test_relative_file_path_and_extra(monkeypatch):
    monkeypatch.chdir(FNS.parent)
    reward = PythonReward(PythonRewardConfig(function=f"{FNS.name}:extra_value"))
    batch = Batch(objects={"response_text": ["a", "b"], "ground_truth": [None, None],
                           "extra": [{"value": 0.25}, {"value": -2}]})
    assert reward(batch).scores.tolist() == [0.25, -2.0]


@pytest.mark.parametrize(("value", "score", "components"), [
    (0.5, 0.5, {}),
    (True, 1.0, {}),
    (3, 3.0, {}),
    ({"score": 2, "format": 1, "length": 0.5}, 2.0, {"format": 1.0, "length": 0.5}),
])
def test_return_values(value, score, components):
    verdict = as_verdict(value)
    assert (verdict.score, verdict.components) == (score, components)


@pytest.mark.parametrize("value", [{"format": 1.0}, "0.5", None, [1.0]])
def test_bad_return_values_are_refused(value):
    with pytest.raises((TypeError, ValueError)):
        as_verdict(value)


@pytest.mark.parametrize(("spec", "message"), [
    ("no_colon_here", "must be 'package.module:function'"),
    (f"{FNS}:", "must be 'package.module:function'"),
    ("/no/such/file.py:f", "no such file"),
    ("no_such_module_xyz:f", "cannot import module"),
    (f"{FNS}:missing", "has no function 'missing'"),
    (f"{FNS}:not_callable", "is a int, not a function"),
])
def test_bad_specs_fail_when_the_reward_is_built(spec, message):
    with pytest.raises((TypeError, ValueError), match=message):
        PythonReward(PythonRewardConfig(function=spec))


def test_a_file_is_loaded_once_per_process():
    assert load_function(f"{FNS}:by_prefix") is load_function(f"{FNS}:by_prefix")


def test_with_workers_the_function_is_loaded_and_called_in_each_worker_process():
    reward = PythonReward(PythonRewardConfig(function=f"{FNS}:pid", num_workers=2))
    try:
        pids = set(reward(Batch(objects={"response_text": ["a"] * 4, "ground_truth": [None] * 4})).scores.tolist())
    finally:
        reward.close()
    assert float(os.getpid()) not in pids and 1 <= len(pids) <= 2
