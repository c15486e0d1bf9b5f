"""The template's algorithm and reward held to rlloom's plugin contracts (rlloom_trainer.contracts): each test
class names the entry point (pyproject.toml) and the registered name; pytest runs the inherited tests.
Run from this folder, with the plugin and rlloom-trainer installed: pytest tests"""

from rlloom_trainer.contracts import AlgorithmContract, RewardContract


class TestToyReinforce(AlgorithmContract):
    entry_point = "template"
    name = "toy_reinforce"


class TestToyLength(RewardContract):
    entry_point = "template"
    name = "toy_length"
    rows = [("12", None), ("a much longer response", None)]
