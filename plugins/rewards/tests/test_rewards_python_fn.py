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
def test_bad_specs_fail_when_the_config_is_built(spec, message):
    with pytest.raises((TypeError, ValueError), match=message):
        PythonRewardConfig(function=spec)


def test_a_file_is_loaded_once_per_process():
    assert load_function(f"{FNS}:by_prefix") is load_function(f"{FNS}:by_prefix")


def test_with_workers_the_function_is_loaded_and_called_in_each_worker_process():
    reward = PythonReward(PythonRewardConfig(function=f"{FNS}:pid", num_workers=2))
    try:
        pids = set(reward(Batch(objects={"response_text": ["a"] * 4, "ground_truth": [None] * 4})).scores.tolist())
    finally:
        reward.close()
    assert float(os.getpid()) not in pids and 1 <= len(pids) <= 2


def trl_batch(responses, ids, mask, extra):
    import torch

    return Batch({"responses": torch.tensor(ids), "response_mask": torch.tensor(mask)},
                 objects={"response_text": responses, "prompt_text": ["p1", "prompt2"][:len(responses)],
                          "ground_truth": ["g"] * len(responses), "data_source": ["d"] * len(responses),
                          "extra": extra})


def test_trl_form_gets_columns_by_name_and_every_argument_with_kwargs():
    reward = PythonReward(PythonRewardConfig(function=f"{FNS}:trl_accuracy"))
    result = reward(trl_batch([" 4", "5"], [[7, 8], [9, 0]], [[1, 1], [1, 0]],
                              [{"solution": "4", "level": 1}, {"solution": "6", "level": 2}]))
    assert result.scores.tolist() == [1.0, 0.0] and result.num_errors == 0
    # kwargs beyond completions and solution: prompts, completion_ids, ground_truth, data_source, level
    assert result.components["kwargs"].tolist() == [5.0, 5.0]


def test_trl_form_without_kwargs_gets_only_what_it_names_and_none_is_an_error():
    reward = PythonReward(PythonRewardConfig(function=f"{FNS}:trl_named_only", error_score=-1.0))
    result = reward(trl_batch(["ab", ""], [[7, 8], [9, 0]], [[1, 1], [0, 0]], [{}, {}]))
    assert result.scores.tolist() == [len("p1") + 2, -1.0]
    assert result.num_errors == 1 and "returned None" in result.info["error"][1]


@pytest.mark.parametrize(("name", "message"), [
    ("trl_needs_a_missing_column", "needs ['answer_key']"),
    ("trl_raises", "batched reward failed"),
    ("trl_wrong_length", "returned 1 values for 2 completions"),
])
def test_a_failing_trl_form_call_is_an_error_on_every_row_never_raised(name, message):
    reward = PythonReward(PythonRewardConfig(function=f"{FNS}:{name}", error_score=-0.5))
    result = reward(trl_batch(["a", "b"], [[1], [2]], [[1], [1]], [{}, {}]))
    assert result.scores.tolist() == [-0.5, -0.5] and result.num_errors == 2
    assert all(message in error for error in result.info["error"])


def test_trl_form_runs_in_a_worker_under_the_time_limit():
    reward = PythonReward(PythonRewardConfig(function=f"{FNS}:trl_accuracy", num_workers=1, timeout_s=30))
    try:
        result = reward(trl_batch(["4"], [[1]], [[1]], [{"solution": "4"}]))
    finally:
        reward.close()
    assert result.scores.tolist() == [1.0]


@pytest.mark.parametrize(("function", "named"), [
    ("/no/such/rewards.py:score", "no such file"),
    (f"{FNS}:missing", "has no function 'missing'"),
    ("", "reward.function=''"),
])
def test_rlloom_train_refuses_a_wrong_function_before_anything_starts(function, named, tmp_path, capsys):
    from rlloom.cli import main

    status = main(["train", "preset=tiny", "reward=python", f"reward.function={function}",
                   f"model.cache_dir={tmp_path / 'models'}", f"trainer.run_dir={tmp_path / 'run'}"])
    err = capsys.readouterr().err
    assert status == 2 and named in err and "Traceback" not in err, err
    assert sorted(os.listdir(tmp_path)) == [], "nothing is left behind"


@pytest.mark.parametrize(("columns", "function", "refused"), [
    ("[]", "trl_needs_a_missing_column", True),  # answer_key: no batch carries it
    ("[answer_key]", "trl_needs_a_missing_column", False),
    ("[]", "trl_named_only", False),  # prompts, completions, completion_ids: every batch has them
    ("[]", "by_prefix", False),  # the row form takes extra as a dict: nothing to check
])
def test_a_trl_form_function_needing_an_unlisted_column_is_refused_when_composed(columns, function, refused, tmp_path):
    from rlloom.config import ConfigError, compose_config

    data = tmp_path / "task.jsonl"
    data.write_text('{"prompt": "p", "ground_truth": "g", "answer_key": "a"}\n' * 4)
    overrides = ["preset=tiny", "data=files", f"data.train_files={data}", f"data.extra_columns={columns}",
                 "reward=python", f"reward.function={FNS}:{function}"]
    if not refused:
        compose_config(overrides)
        return
    with pytest.raises(ConfigError, match=r"needs \['answer_key'\], which no batch will carry.*"
                                          r"data.extra_columns=\[answer_key\]"):
        compose_config(overrides)
