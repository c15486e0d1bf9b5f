"""FSDPConfig validation and its use as a Hydra structured config (the LR schedule formula:
rlloom-enginekit's tests)."""

from __future__ import annotations

import pytest
from omegaconf import OmegaConf

from rlloom_fsdp import FSDPConfig


@pytest.mark.parametrize(
    ("overrides", "message"),
    [
        ({"lr_schedule": "linear"}, r"lr_schedule must be one of \['constant', 'cosine'\], got 'linear'"),
        ({"micro_batch_size": 0}, "micro_batch_size must be >= 1, got 0"),
        ({"log_prob_micro_batch_size": 0}, "log_prob_micro_batch_size must be >= 1 or None"),
        ({"betas": [0.9]}, r"betas must be two values in \[0, 1\)"),
        ({"betas": [0.9, 1.0]}, r"betas must be two values in \[0, 1\)"),
        ({"grad_clip": -1.0}, "grad_clip must be >= 0"),
        ({"warmup_steps": -1}, "warmup_steps must be >= 0"),
        ({"eps": 0.0}, "eps must be a finite number > 0"),
        ({"eps": float("nan")}, "eps must be a finite number > 0"),
        ({"lr": float("inf")}, "lr must be a finite number >= 0"),
        ({"min_lr_ratio": 1.5}, r"min_lr_ratio must be in \[0, 1\]"),
    ],
)
def test_invalid_config_names_the_field(overrides, message):
    with pytest.raises(ValueError, match=message):
        FSDPConfig(**overrides)


def test_config_is_a_hydra_structured_config():
    schema = OmegaConf.structured(FSDPConfig)
    merged = OmegaConf.merge(schema, {"lr": 3e-6, "betas": [0.9, 0.95], "log_prob_micro_batch_size": 16})
    cfg = OmegaConf.to_object(merged)
    assert isinstance(cfg, FSDPConfig)
    assert (cfg.lr, list(cfg.betas), cfg.log_prob_micro_batch_size) == (3e-6, [0.9, 0.95], 16)
    with pytest.raises(ValueError, match="lr_schedule"):
        OmegaConf.to_object(OmegaConf.merge(schema, {"lr_schedule": "step"}))
