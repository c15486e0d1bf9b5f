"""What an algorithm plugin owes rlloom: :class:`AlgorithmContract`."""

from __future__ import annotations

import math
from typing import ClassVar

import pytest

from rlloom_trainer.contracts.plugin import PluginContract
from rlloom_trainer.testing import train_tiny

STEPS = 2


class AlgorithmContract(PluginContract):
    """``algorithm=<name>`` trains: :data:`STEPS` steps of ``preset=tiny`` (plus ``overrides``: what the
    algorithm needs beyond the preset, e.g. a reward of its own) log a row per step, every metric finite, and
    at least one ``actor/`` metric per step (the actor was updated). Settings of ``config`` are passed as
    ``algorithm.<key>=<value>`` overrides."""

    kind: ClassVar[str] = "algorithm"
    overrides: ClassVar[tuple[str, ...]] = ()

    @pytest.mark.slow
    def test_steps_of_the_tiny_preset_train_with_it(self, registry, tmp_path, rlloom_tiny_model_cache):
        settings = [f"algorithm.{key}={value}" for key, value in self.config.items()]
        rows = train_tiny(tmp_path / "run", f"algorithm={self.name}", f"trainer.total_steps={STEPS}",
                          "trainer.test_freq=0", "trainer.save_freq=0", *settings, *self.overrides,
                          cache_dir=rlloom_tiny_model_cache)
        steps = [row for row in rows if row["step"] > 0]
        assert [row["step"] for row in steps] == list(range(1, STEPS + 1)), [row["step"] for row in rows]
        not_finite = sorted({key for row in steps for key, value in row.items()
                             if value is None or (isinstance(value, float) and not math.isfinite(value))})
        assert not_finite == [], f"metrics that were not finite: {not_finite}"
        assert all(any(key.startswith("actor/") for key in row) for row in steps), (
            "a step logged no actor/ metric: was the actor updated?")
