"""did_you_mean: the closest choices by difflib's ratio, ties together, nothing when none is close."""

from rlloom.suggest import did_you_mean


def test_one_close_choice_is_named():
    assert did_you_mean("total_step", ["total_steps", "train_batch_size", "seed"]) == " Did you mean 'total_steps'?"


def test_ties_are_all_named_and_case_is_ignored():
    assert did_you_mean("GPRO", ["grpo", "gspo", "ppo", "dapo"]) == " Did you mean 'grpo' or 'gspo'?"


def test_nothing_close_says_nothing():
    assert did_you_mean("xyzzy", ["grpo", "ppo"]) == ""
    assert did_you_mean("grpo", []) == ""
