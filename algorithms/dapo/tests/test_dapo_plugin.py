"""DAPOConfig defaults and validation, Hydra round trip, registration through the entry point."""

import pytest
from omegaconf import OmegaConf
from rlloom_dapo import DAPO, DAPOConfig
from rlloom_trainer.testing import entry_point_registry


def test_defaults_are_dapo_s():
    cfg = DAPOConfig()
    assert (cfg.clip_ratio_low, cfg.clip_ratio_high, cfg.loss_agg_mode) == (0.2, 0.28, "token-mean")
    assert cfg.dynamic_sampling and not cfg.use_kl_loss and not DAPO(cfg).needs_reference


@pytest.mark.parametrize(
    "field, value, rule",
    [
        ("max_gen_rounds", 0, ">= 1"),
        ("overlong_buffer_len", 0, ">= 1"),
        ("overlong_penalty_factor", -1.0, ">= 0"),
        ("clip_ratio_high", -0.1, ">= 0"),
    ],
)
def test_invalid_values_name_the_field(field, value, rule):
    with pytest.raises(ValueError) as error:
        DAPOConfig(**{field: value})
    assert str(error.value) == f"algorithm.{field}={value}: must be {rule}"


def test_hydra_round_trip_and_entry_point():
    node = OmegaConf.structured(DAPOConfig)
    node.merge_with_dotlist(["max_gen_rounds=5", "overlong_buffer_enable=true"])
    assert OmegaConf.to_object(node) == DAPOConfig(max_gen_rounds=5, overlong_buffer_enable=True)
    registry = entry_point_registry("dapo")
    component = registry.get("algorithm", "dapo")
    assert component.config is DAPOConfig and component.distribution == "rlloom-dapo"
    assert isinstance(registry.build("algorithm", "dapo", DAPOConfig()), DAPO)
