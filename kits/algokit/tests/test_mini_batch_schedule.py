"""``MiniBatchSchedule``: an algorithm config's optimizer steps per training step (its
:class:`rlloom.protocols.PlansOptimizerSteps` ability), and the error naming the keys."""

from dataclasses import dataclass

import pytest
from rlloom.protocols import PlansOptimizerSteps
from rlloom_algokit.config import MiniBatchSchedule


@dataclass
class Schedule(MiniBatchSchedule):
    ppo_epochs: int = 1
    ppo_mini_batch_size: int = 0


@pytest.mark.parametrize(("epochs", "mini", "batch", "steps"), [(1, 0, 8, 1), (1, 2, 8, 4), (3, 4, 8, 6)])
def test_mini_batch_schedule_counts_optimizer_steps(epochs, mini, batch, steps):
    schedule = Schedule(ppo_epochs=epochs, ppo_mini_batch_size=mini)
    assert isinstance(schedule, PlansOptimizerSteps)
    assert schedule.optimizer_steps_per_step(batch) == steps  # epochs * batch / (mini or batch)


def test_mini_batch_schedule_names_the_keys_when_it_cannot_cut_the_batch():
    with pytest.raises(ValueError, match=r"algorithm.ppo_mini_batch_size=3 must divide trainer.train_batch_size=8"):
        Schedule(ppo_mini_batch_size=3).optimizer_steps_per_step(8)
