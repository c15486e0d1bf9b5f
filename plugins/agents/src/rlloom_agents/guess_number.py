"""The environment and dataset ``guess_number``: find a secret integer in ``[1, high]`` by guessing, told
"higher" or "lower" after each wrong guess.

Dataset (``data=guess_number``): every secret in ``[1, high]``, shuffled with the run's seed;
``num_val`` of them validate, the rest train (``num_train``: 0 = all). Each row's prompt says the range
and the rules, ``ground_truth`` is the secret.

Environment: each turn's last integer is the guess. Reward 1 and done when it is the secret; else
reward 0 and the observation ``"higher"`` / ``"lower"`` (``"Answer with a number."`` when the turn
holds none).
"""

from __future__ import annotations

from rlloom.data import PromptRecord, Splits, seeded_split
from rlloom.types import EnvStep
from rlloom_agents.config import GuessNumberDataConfig
from rlloom_rewardkit.extract import last_integer

PROMPT = ("I am thinking of an integer from 1 to {high}. Guess it. After each wrong guess I will say "
          "higher or lower. Reply with only your guess.")


def build_guess_number(cfg: GuessNumberDataConfig, seed: int) -> Splits:
    """The dataset of the module doc; a ValueError names the sizes that do not fit."""
    train, val = seeded_split(range(1, cfg.high + 1), seed, cfg.num_val, cfg.num_train, "guess_number")

    def record(secret: int) -> PromptRecord:
        return PromptRecord([{"role": "user", "content": PROMPT.format(high=cfg.high)}], secret, "guess_number")

    return Splits([record(secret) for secret in train], [record(secret) for secret in val])


class GuessNumber:
    """The environment of the module doc (:class:`~rlloom.protocols.Environment`)."""

    def __init__(self) -> None:
        self.secret: int | None = None

    def reset(self, row: PromptRecord) -> str | None:
        self.secret = int(row.ground_truth)
        return None

    def step(self, action: str) -> EnvStep:
        guess = last_integer(action)
        if guess is None:
            return EnvStep("Answer with a number.", 0.0, False)
        if guess == self.secret:
            return EnvStep(None, 1.0, True)
        return EnvStep("higher" if guess < self.secret else "lower", 0.0, False)
