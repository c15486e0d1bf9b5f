"""The entry point registers every dataset and reward, with configs usable as Hydra structured configs."""

import importlib.metadata

import pytest
from omegaconf import OmegaConf
from rlloom.plugins.registry import Registry
from rlloom_tasks.rewards.gym import AnswerFormat


@pytest.fixture(scope="module")
def registry():
    (entry_point,) = importlib.metadata.entry_points(group="rlloom", name="tasks")
    registry = Registry(entry_points=[entry_point])
    assert [status.status for status in registry.statuses] == ["loaded"], registry.statuses[0].traceback
    return registry


def test_registers_datasets_and_rewards(registry):
    assert registry.choices("data") == ["arithmetic", "digits", "files", "reasoning_gym"]
    assert registry.choices("reward") == ["arithmetic", "digit_fraction", "forbidden_digits", "format",
                                         "reasoning_gym"]
    assert {c.distribution for kind in ("data", "reward") for c in registry.components[kind].values()} == {
        "rlloom-tasks"
    }


@pytest.mark.parametrize("kind", ["data", "reward"])
def test_every_config_round_trips_through_omegaconf(registry, kind, tmp_path):
    (tmp_path / "train.jsonl").write_text("")
    # Settings a config cannot do without (data=files has no default file, and checks that it exists).
    required = {"files": {"train_files": [str(tmp_path / "train.jsonl")], "val_fraction": 0.1}}
    for name, component in registry.components[kind].items():
        node = OmegaConf.merge(OmegaConf.structured(component.config), required.get(name, {}))
        assert OmegaConf.to_object(node) == component.config(**required.get(name, {}))


def test_built_through_the_registry_with_overrides(registry):
    data_cfg = OmegaConf.to_object(OmegaConf.merge(
        OmegaConf.structured(registry.get("data", "arithmetic").config), {"num_val": 10, "operations": ["-"]}
    ))
    splits = registry.build("data", "arithmetic", data_cfg, 0)
    assert (len(splits.val), len(splits.train)) == (10, 90)
    assert all("-" in r.extra["expression"] for r in splits.val)

    reward_cfg = OmegaConf.to_object(OmegaConf.merge(
        OmegaConf.structured(registry.get("reward", "reasoning_gym").config), {"answer_format": "gsm8k"}
    ))
    assert reward_cfg.answer_format is AnswerFormat.gsm8k
    with pytest.raises(Exception, match="answer_format"):
        OmegaConf.merge(OmegaConf.structured(registry.get("reward", "reasoning_gym").config),
                        {"answer_format": "nope"})
