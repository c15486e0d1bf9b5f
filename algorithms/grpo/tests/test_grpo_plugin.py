"""GRPOConfig validation, Hydra structured-config round trip and registration through the entry point."""

import pytest
from omegaconf import OmegaConf
from rlloom_algokit import GRPO, GRPOConfig
from rlloom_trainer.testing import entry_point_registry


@pytest.mark.parametrize(
    "field, value, rule",
    [
        ("n", 0, ">= 1"),
        ("clip_ratio_low", -0.1, ">= 0"),
        ("clip_ratio_high", -0.1, ">= 0"),
        ("clip_ratio_c", 1.0, "> 1 (or null)"),
        ("loss_agg_mode", "mean", "one of token-mean, seq-mean-token-sum, seq-mean-token-mean, seq-mean-token-sum-norm."),
        ("kl_loss_type", "k4", "one of k1, kl, abs, k2, mse, k3, low_var_kl."),
        ("kl_loss_coef", -1.0, ">= 0"),
        ("ppo_epochs", 0, ">= 1"),
        ("ppo_mini_batch_size", -1, ">= 0"),
        ("epsilon", 0.0, "> 0"),
    ],
)
def test_invalid_values_name_the_field(field, value, rule):
    with pytest.raises(ValueError) as error:
        GRPOConfig(**{field: value})
    assert str(error.value).startswith(f"algorithm.{field}={value}: must be {rule}")


def test_hydra_structured_config_round_trip():
    node = OmegaConf.structured(GRPOConfig)
    node.merge_with_dotlist(["n=4", "clip_ratio_c=3.0", "loss_agg_mode=seq-mean-token-sum-norm"])
    cfg = OmegaConf.to_object(node)
    assert cfg == GRPOConfig(n=4, clip_ratio_c=3.0, loss_agg_mode="seq-mean-token-sum-norm")
    node.loss_agg_mode = "bogus"
    with pytest.raises(ValueError, match="loss_agg_mode"):
        OmegaConf.to_object(node)


def test_entry_point_registers_grpo():
    registry = entry_point_registry("grpo")
    component = registry.get("algorithm", "grpo")
    assert component.config is GRPOConfig and component.distribution == "rlloom-grpo"
    algorithm = registry.build("algorithm", "grpo", GRPOConfig(use_kl_loss=True))
    assert isinstance(algorithm, GRPO)
    assert algorithm.needs_reference is True and algorithm.needs_critic is False
    assert GRPO(GRPOConfig()).needs_reference is False
