"""``reward=math``: is the response's final answer mathematically equal to the ground truth?

**Where the answer is.** The first of these that the response holds is its answer:

1. the content of the last ``\\boxed{...}``;
2. the content of the last ``<answer>...</answer>`` (free text inside is allowed: ``x = 7``);
3. the number after the last GSM8K-style ``####`` marker (``#### 1,018`` → ``1018``);
4. otherwise the whole response, from which ``math-verify`` takes the last mathematical
   expression (LaTeX such as ``$\\frac{3}{4}$``, or a plain expression/number).

**Ground truth**: a number or a string (LaTeX or plain: ``"72"``, ``"1,018"``, ``"\\frac{1}{2}"``,
``"x^2+1"``); a GSM8K solution text is reduced to the number after its last ``####``. A ground
truth that ``math-verify`` cannot parse at all (e.g. ``""``) or that is neither a string nor a
number makes the row an error.

**Equivalence** is ``math_verify.verify(gold, answer)``: numeric equality after rounding to
``float_rounding`` decimals (``0.5`` = ``\\frac{1}{2}`` = ``1/2``) and symbolic equality of
expressions (``(x+1)^2`` = ``x^2+2x+1``). math-verify's own ``SIGALRM`` timeouts are switched off:
the per-sample limit is ``reward.timeout_s`` (:mod:`rlloom_rewardkit.runner`).

Score: ``correct_score`` when equal, else ``incorrect_score`` (also when no answer is found).
Components: ``correct`` (1.0/0.0) and ``extracted`` (1.0 when an answer was found).
"""

from __future__ import annotations

from dataclasses import dataclass

from rlloom_rewardkit import ExecutionConfig, RowReward

from rlloom_rewards.math_verifier import MathVerifier


@dataclass
class MathRewardConfig(ExecutionConfig):
    """Options of ``reward=math`` (see the module doc)."""

    correct_score: float = 1.0  # the answer equals the ground truth
    incorrect_score: float = 0.0  # otherwise (also when no answer is found)
    float_rounding: int = 6  # decimals numbers are compared at


class MathReward(RowReward):
    """See the module doc."""

    def __init__(self, cfg: MathRewardConfig) -> None:
        verify = MathVerifier(cfg.correct_score, cfg.incorrect_score, cfg.float_rounding)
        super().__init__(verify, cfg, ("response_text", "ground_truth"))
