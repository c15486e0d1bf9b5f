"""``reward=math``: answer extraction and equivalence on hand-written cases."""

from __future__ import annotations

import pytest
from rlloom import Batch
from rlloom_rewards.math_answer import MathReward, MathRewardConfig
from rlloom_rewards.math_verifier import MathVerifier

# (response, ground truth, correct?, an answer was extracted?) - each judged by hand.
CASES = [
    # \boxed{} wins over everything else in the text
    (r"First 3, then 4, so \boxed{7}. Later I wrote 8.", "7", True, True),
    (r"The answer is \boxed{\frac{1}{2}}", "0.5", True, True),
    (r"so \boxed{0.5}", r"\frac{1}{2}", True, True),
    (r"\boxed{(x+1)^2}", "x^2+2x+1", True, True),
    (r"\boxed{\sqrt{2}}", "2^{1/2}", True, True),
    (r"\boxed{-3}", "-3", True, True),
    (r"\boxed{3}", "-3", False, True),
    (r"\boxed{2}", "3", False, True),
    (r"\boxed{\frac{3}{4}}", "0.75", True, True),
    (r"\boxed{x = 2}", "2", True, True),
    # <answer> tags, free text inside
    ("<think>6*7</think><answer>42</answer>", "42", True, True),
    ("<answer>x = 7</answer> and then 9", "7", True, True),
    # GSM8K #### marker: the number after it, thousands separators dropped
    ("He earns 28080 pounds.\n#### 28,080", "28080", True, True),
    ("#### 17\nCheck: 3+4=7", "17", True, True),
    ("#### 1018", "She has 1018 left.\n#### 1,018", True, True),  # GSM8K solution as ground truth
    # free text: the last expression, or what follows "the answer is"
    ("So 5 apples plus 3 = 8 apples.", "8", True, True),
    ("I think it is 12.50 dollars", "12.5", True, True),
    ("The result is -1,234.5", "-1234.5", True, True),
    ("Final: 3/4", "0.75", True, True),
    (r"We get $x^2+2x+1$", "(x+1)^2", True, True),
    ("x = 2, y = 3", "2", False, True),
    ("no idea", "3", False, False),
    ("", "3", False, False),
    # a numeric ground truth
    (r"\boxed{72}", 72, True, True),
    (r"\boxed{0.25}", 0.25, True, True),
]


@pytest.mark.parametrize(("response", "ground_truth", "correct", "extracted"), CASES)
def test_extraction_and_equivalence(response, ground_truth, correct, extracted):
    verdict = MathVerifier(correct_score=1.0, incorrect_score=-0.5)(response, ground_truth)
    assert verdict.components == {"correct": float(correct), "extracted": float(extracted)}
    assert verdict.score == (1.0 if correct else -0.5)


def test_reward_scores_a_batch_and_counts_unparsable_ground_truths_as_errors():
    reward = MathReward(MathRewardConfig(error_score=-1.0))
    batch = Batch(objects={
        "response_text": [r"\boxed{4}", "it is 5", r"\boxed{4}", r"\boxed{1}"],
        "ground_truth": ["4", "4", "", None],
    })
    result = reward(batch)
    assert result.scores.tolist() == [1.0, 0.0, -1.0, -1.0]
    assert result.components["correct"].tolist() == [1.0, 0.0, 0.0, 0.0]
    assert result.num_errors == 2
    assert "math-verify can parse" in result.info["error"][2]
    assert "NoneType" in result.info["error"][3]
