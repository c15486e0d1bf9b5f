"""Checks the tests of every member of the GRPO family share: its registration by rlloom-grpo's
entry point, and its reward rising on the tiny task."""

from rlloom.plugins.registry import Registry
from rlloom_trainer.testing import entry_point_registry


def built_member(name: str, config_class: type) -> tuple[object, Registry]:
    """The algorithm rlloom-grpo's entry point builds for ``algorithm=<name>`` with ``config_class()``,
    and that registry; fails unless ``config_class`` is the config it registers for ``name``."""
    registry = entry_point_registry("grpo")
    assert registry.get("algorithm", name).config is config_class
    return registry.build("algorithm", name, config_class()), registry


def assert_reward_rises(scores: list[float]) -> None:
    """20 training steps, the mean reward of the last three above that of the first three by 0.4."""
    assert len(scores) == 20
    assert sum(scores[-3:]) / 3 > sum(scores[:3]) / 3 + 0.4, scores
