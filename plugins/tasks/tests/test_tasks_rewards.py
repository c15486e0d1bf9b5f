"""Rule-based rewards on hand-written responses; failing verifiers are counted, never fatal, and the
shared executor's timeouts and worker processes apply to them."""

import time

import numpy as np
import pytest
import torch
from rlloom import Batch
from rlloom_tasks.rewards import arithmetic
from rlloom_tasks.rewards.arithmetic import ArithmeticReward, ArithmeticRewardConfig
from rlloom_tasks.rewards.format import FormatReward, FormatRewardConfig


def _batch(**objects) -> Batch:
    return Batch(objects={name: list(values) for name, values in objects.items()})


def test_arithmetic_reward_on_hand_written_responses():
    cases = [  # (response, ground truth, correct?)
        ("5", "5", True),
        ("The answer is 7.", "7", True),
        ("-3", "-3", True),
        ("2-5 = -3", "-3", True),
        ("12 apples and then some", "12", True),
        ("1,234", "1234", True),
        ("answer: 42", 42, True),  # an int ground truth
        ("I think 3, no wait, 4", "3", False),  # the LAST integer counts
        ("-3", "3", False),
        ("7.5", "7", False),
        ("no idea", "8", False),  # no number at all
        ("", "0", False),
    ]
    reward = ArithmeticReward(ArithmeticRewardConfig(correct_score=2.0, incorrect_score=-0.5, error_score=-1.0))
    result = reward(_batch(response_text=[c[0] for c in cases], ground_truth=[c[1] for c in cases]))
    expected = [2.0 if correct else -0.5 for _, _, correct in cases]
    assert result.scores.dtype == torch.float32
    assert result.scores.tolist() == expected
    assert result.components["correct"].tolist() == [1.0 if c[2] else 0.0 for c in cases]
    assert result.num_errors == 0


def test_arithmetic_reward_counts_an_unusable_ground_truth_as_an_error():
    reward = ArithmeticReward(ArithmeticRewardConfig(error_score=-1.0))
    result = reward(_batch(response_text=["9", "9", "4"], ground_truth=["nine", "9", None]))
    assert result.scores.tolist() == [-1.0, 1.0, -1.0]
    assert result.num_errors == 2
    assert result.info["error"][0].startswith("ValueError")
    assert result.info["error"][2].startswith("TypeError")


def test_arithmetic_reward_honours_reward_timeout_s(monkeypatch):
    original = arithmetic.last_integer
    monkeypatch.setattr(arithmetic, "last_integer", lambda text: time.sleep(60) if text == "slow" else original(text))
    reward = ArithmeticReward(ArithmeticRewardConfig(timeout_s=0.3, timeout_score=-2.0))
    started = time.monotonic()
    result = reward(_batch(response_text=["slow", "5"], ground_truth=["5", "5"]))
    assert time.monotonic() - started < 10
    assert result.scores.tolist() == [-2.0, 1.0]
    assert (result.num_errors, result.num_timeouts) == (0, 1)
    assert result.info["status"] == ["timeout", "ok"]
    assert result.components["correct"].tolist() == [0.0, 1.0]


def test_arithmetic_reward_in_a_worker_process_scores_and_counts_errors_as_in_process():
    batch = _batch(response_text=["9", "9", "4"], ground_truth=["nine", "9", None])
    in_process = ArithmeticReward(ArithmeticRewardConfig(error_score=-1.0))(batch)
    pooled = ArithmeticReward(ArithmeticRewardConfig(error_score=-1.0, num_workers=1))
    try:
        result = pooled(batch)
    finally:
        pooled.close()
    assert result.scores.tolist() == in_process.scores.tolist() == [-1.0, 1.0, -1.0]
    assert result.num_errors == 2 and result.info["status"] == ["error", "ok", "error"]
    assert result.info["error"] == in_process.info["error"]


@pytest.mark.parametrize("options", [{"num_workers": -1}, {"timeout_s": -1.0}])
def test_every_tasks_reward_config_checks_the_execution_keys(options):
    from rlloom_tasks.rewards.digits import DigitFractionRewardConfig
    from rlloom_tasks.rewards.forbidden import ForbiddenDigitsRewardConfig
    from rlloom_tasks.rewards.gym import ReasoningGymRewardConfig

    for config in (ArithmeticRewardConfig, FormatRewardConfig, DigitFractionRewardConfig,
                   ForbiddenDigitsRewardConfig, ReasoningGymRewardConfig):
        with pytest.raises(ValueError, match=f"reward.{next(iter(options))}"):
            config(**options)


def test_arithmetic_reward_names_missing_fields():
    with pytest.raises(ValueError, match="ground_truth"):
        ArithmeticReward(ArithmeticRewardConfig())(_batch(response_text=["1"]))


def test_format_reward_default_pattern_is_exactly_one_digit():
    responses = ["5", " 7\n", "55", "a", "", "5 6", "0"]
    result = FormatReward(FormatRewardConfig())(_batch(response_text=responses))
    expected = [1.0, 1.0, 0.0, 0.0, 0.0, 0.0, 1.0]
    assert result.scores.tolist() == expected
    assert result.components["format"].tolist() == expected
    assert result.num_errors == 0


def test_format_reward_custom_pattern_scores_and_errors():
    cfg = FormatRewardConfig(pattern=r"<answer>\d+</answer>", match_score=1.0, mismatch_score=-1.0, error_score=0.25)
    responses = np.array(["<answer>12</answer>", "<answer>x</answer>", None], dtype=object)
    result = FormatReward(cfg)(_batch(response_text=responses))
    assert result.scores.tolist() == [1.0, -1.0, 0.25]
    assert result.num_errors == 1  # None has no .strip()


def test_format_reward_rejects_an_invalid_pattern():
    with pytest.raises(ValueError, match=r"reward\.pattern='\('"):
        FormatReward(FormatRewardConfig(pattern="("))


@pytest.mark.parametrize(
    ("response", "expected"),
    [("7", 1.0), ("12ab", 0.5), ("", 0.0), ("abc", 0.0), (" 3 ", 1 / 3), ("9\n", 0.5)],
)
def test_digit_fraction_reward_by_hand(response, expected):
    from rlloom_tasks.rewards.digits import DigitFractionReward, DigitFractionRewardConfig

    result = DigitFractionReward(DigitFractionRewardConfig())(Batch(objects={"response_text": [response, None]}))
    assert result.scores[0].item() == pytest.approx(expected)
    assert result.num_errors == 1 and result.scores[1].item() == 0.0


@pytest.mark.parametrize(
    ("digits", "response", "expected"),
    [("01234", "7", 0.0), ("01234", "73", 1.0), ("01234", "", 0.0), ("7", "a7b", 1.0), ("7", "1234", 0.0)],
)
def test_forbidden_digits_cost_by_hand(digits, response, expected):
    from rlloom_tasks.rewards.forbidden import ForbiddenDigitsReward, ForbiddenDigitsRewardConfig

    result = ForbiddenDigitsReward(ForbiddenDigitsRewardConfig(digits=digits))(
        Batch(objects={"response_text": [response, None]})
    )
    assert result.scores[0].item() == expected
    assert result.components["forbidden"][0].item() == expected
    assert result.num_errors == 1 and result.scores[1].item() == 0.0


@pytest.mark.parametrize("digits", ["", "1a"])
def test_forbidden_digits_rejects_non_digits(digits):
    from rlloom_tasks.rewards.forbidden import ForbiddenDigitsRewardConfig

    with pytest.raises(ValueError, match="digits must be a non-empty string of digits"):
        ForbiddenDigitsRewardConfig(digits=digits)
