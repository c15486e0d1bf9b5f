"""``data=digits``: plain-text prompts asking for one digit, for the tiny random-init test model.

24 distinct prompts ``"Q: {verb} {object}\\nA:"`` (6 verbs x 4 objects, e.g.
``"Q: pick a digit\\nA:"``), shuffled with ``random.Random(seed)``: the first ``num_val`` are the
validation split, the next ``num_train`` the training split (``num_train = 0``: all the rest).
Defaults: 4 val, 20 train. No ground truth (``None``): pair with ``reward=format``, which scores
whether the response is exactly one digit. ``data_source = "digits"``.

Each record also carries a demonstration answer for ``algorithm=sft``: ``extra = {"response": " <d>"}``
where d depends only on the prompt's object: 1 + its index in :data:`OBJECTS` ("a digit" -> 1, "one
digit" -> 2, "a single digit" -> 3, "any digit" -> 4), the same for every seed and split.
"""

from __future__ import annotations

from dataclasses import dataclass

from rlloom.data import PromptRecord, Splits, seeded_split


VERBS = ("pick", "choose", "name", "give", "say", "write")
OBJECTS = ("a digit", "one digit", "a single digit", "any digit")
PROMPTS = tuple(f"Q: {verb} {obj}\nA:" for verb in VERBS for obj in OBJECTS)


@dataclass
class DigitsDataConfig:
    """Options of ``data=digits`` (see the module doc)."""

    num_val: int = 4  # validation prompts (disjoint from training)
    num_train: int = 0  # 0: every prompt not in val


def answer(prompt: str) -> str:
    """The demonstration answer to one of :data:`PROMPTS` (see the module doc)."""
    return f" {PROMPTS.index(prompt) % len(OBJECTS) + 1}"


def build_digits(cfg: DigitsDataConfig, seed: int) -> Splits:
    """The dataset of the module doc; ``ValueError`` when the sizes do not fit in 24 prompts."""
    train, val = seeded_split(PROMPTS, seed, cfg.num_val, cfg.num_train, "digits")

    def records(prompts: list[str]) -> list[PromptRecord]:
        return [PromptRecord(prompt=text, ground_truth=None, data_source="digits", extra={"response": answer(text)})
                for text in prompts]

    return Splits(train=records(train), val=records(val))
