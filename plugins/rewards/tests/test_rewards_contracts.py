"""The rewards plugin's reward functions pass the contract third-party ones are held to (rlloom_trainer.contracts)."""

from rlloom_trainer.contracts import RewardContract


class TestMathReward(RewardContract):
    entry_point = "rewards"
    name = "math"
    rows = [("so the answer is \\boxed{4}", "4"), ("#### 12", "12"), ("I do not know", "3")]


class TestCodeReward(RewardContract):
    entry_point = "rewards"
    name = "code"
    rows = [("```python\ndef add(a, b):\n    return a + b\n```", {"tests": "assert add(1, 2) == 3"})]
