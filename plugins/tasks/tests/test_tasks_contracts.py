"""The tasks plugin's datasets and rewards pass the contracts third-party ones are held to (rlloom_trainer.contracts)."""

from rlloom_trainer.contracts import DatasetContract, RewardContract


class TestDigitsData(DatasetContract):
    entry_point = "tasks"
    name = "digits"


class TestArithmeticData(DatasetContract):
    entry_point = "tasks"
    name = "arithmetic"


class TestArithmeticReward(RewardContract):
    entry_point = "tasks"
    name = "arithmetic"
    rows = [("8", 8), ("The answer is 8.", 8), ("seven", 7)]


class TestDigitFractionReward(RewardContract):
    entry_point = "tasks"
    name = "digit_fraction"
    rows = [("1234", None), ("ab12", None)]
