"""What a reward plugin owes rlloom: :class:`RewardContract`."""

from __future__ import annotations

import math
from typing import Any, ClassVar

import pytest

from rlloom_trainer.contracts.plugin import PluginContract

HOSTILE_RESPONSES = ["", "\x00\ufffd\udcff", "9" * 100_000, "}{][)(\"'\\", "NaN", "-inf"]
"""Responses a policy can produce that a careless verifier chokes on: empty, control and lone-surrogate
characters, a huge number, unbalanced brackets and quotes, strings that parse as non-finite floats."""


class RewardContract(PluginContract):
    """``reward=<name>`` scores: one finite score per row for ``rows`` ((response text, ground truth) pairs it
    should score; every row's ``extra``, the :class:`rlloom.data.PromptRecord` dict, is the class's ``extra``),
    and the same for rows a verifier chokes on (:data:`HOSTILE_RESPONSES` against each ground truth of
    ``rows``, and a ground truth of None), where a failure is counted in ``num_errors`` (or ``num_timeouts``)
    and scored, never raised (:class:`rlloom.protocols.RewardFn`)."""

    kind: ClassVar[str] = "reward"
    rows: ClassVar[list[tuple[str, Any]]] = []
    extra: ClassVar[dict[str, Any]] = {}
    data_source: ClassVar[str] = "test"

    @pytest.fixture(scope="class")
    @classmethod
    def reward(cls, registry):
        assert cls.rows, f"{cls.__name__}: set rows, (response text, ground truth) pairs to score"
        from rlloom.protocols import Closable

        reward = cls.build(registry)
        yield reward
        if isinstance(reward, Closable):
            reward.close()

    @classmethod
    def build(cls, registry):
        """The reward under test: the component's factory with ``config`` (override to wrap it)."""
        return registry.get("reward", cls.name).factory(cls.component_config(registry))

    def score(self, reward, pairs: list[tuple[str, Any]]):
        from rlloom import Batch

        batch = Batch(objects={"response_text": [text for text, _ in pairs],
                               "ground_truth": [truth for _, truth in pairs],
                               "data_source": [self.data_source] * len(pairs),
                               "prompt_text": ["Answer the question."] * len(pairs),
                               "extra": [dict(self.extra) for _ in pairs]})
        result = reward(batch)
        scores = result.scores.tolist()
        assert len(scores) == len(pairs), f"{len(pairs)} rows, {len(scores)} scores"
        assert all(math.isfinite(score) for score in scores), scores
        assert 0 <= result.num_errors + result.num_timeouts <= len(pairs)
        return result

    def test_one_finite_score_per_row(self, reward):
        self.score(reward, list(self.rows))

    def test_rows_a_verifier_chokes_on_are_scored_not_raised(self, reward):
        truths = [truth for _, truth in self.rows] + [None]
        self.score(reward, [(text, truth) for truth in truths for text in HOSTILE_RESPONSES])
