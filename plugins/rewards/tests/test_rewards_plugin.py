"""The entry point registers every reward and ``data=humaneval``, with Hydra-usable configs."""

import importlib.metadata
from pathlib import Path

import pytest
from omegaconf import OmegaConf
from rlloom.plugins.registry import Registry


# Keys without a usable default: reward=python's function (checked when the config is built).
REQUIRED = {"python": {"function": f"{Path(__file__).with_name('rewards_testfns.py')}:by_prefix"}}


@pytest.fixture(scope="module")
def registry():
    (entry_point,) = importlib.metadata.entry_points(group="rlloom", name="rewards")
    registry = Registry(entry_points=[entry_point])
    assert [status.status for status in registry.statuses] == ["loaded"], registry.statuses[0].traceback
    return registry


def test_registers_rewards_and_humaneval(registry):
    assert registry.choices("reward") == ["code", "combined", "math", "model", "python"]
    assert registry.choices("data") == ["humaneval"]
    assert {c.distribution for kind in ("data", "reward") for c in registry.components[kind].values()} == {
        "rlloom-rewards"
    }


@pytest.mark.parametrize("kind", ["data", "reward"])
def test_every_config_round_trips_through_omegaconf(registry, kind):
    for name, component in registry.components[kind].items():
        required = REQUIRED.get(name, {})
        assert OmegaConf.to_object(OmegaConf.merge(OmegaConf.structured(component.config), required)) \
            == component.config(**required)


def test_execution_options_are_shared_and_typed(registry):
    for name in ("math", "code", "python"):
        cfg = OmegaConf.to_object(OmegaConf.merge(
            OmegaConf.structured(registry.get("reward", name).config), {"num_workers": 2, "timeout_s": 1.5},
            REQUIRED.get(name, {})
        ))
        assert (cfg.num_workers, cfg.timeout_s) == (2, 1.5)
    with pytest.raises(Exception, match="num_workers"):
        OmegaConf.merge(OmegaConf.structured(registry.get("reward", "math").config), {"num_workers": "many"})
