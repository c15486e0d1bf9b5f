"""The entry point registers every reward and ``data=humaneval``, with Hydra-usable configs."""

import importlib.metadata

import pytest
from omegaconf import OmegaConf
from rlloom.plugins.registry import Registry


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
    for component in registry.components[kind].values():
        assert OmegaConf.to_object(OmegaConf.structured(component.config)) == component.config()


def test_execution_options_are_shared_and_typed(registry):
    for name in ("math", "code", "python"):
        cfg = OmegaConf.to_object(OmegaConf.merge(
            OmegaConf.structured(registry.get("reward", name).config), {"num_workers": 2, "timeout_s": 1.5}
        ))
        assert (cfg.num_workers, cfg.timeout_s) == (2, 1.5)
    with pytest.raises(Exception, match="num_workers"):
        OmegaConf.merge(OmegaConf.structured(registry.get("reward", "math").config), {"num_workers": "many"})
