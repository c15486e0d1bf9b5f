"""FSDPConfig validation and its use as a Hydra structured config (the LR schedule formula:
rlloom-enginekit's tests)."""

from __future__ import annotations

import pytest
from omegaconf import OmegaConf

from rlloom_fsdp import FSDPConfig


@pytest.mark.parametrize(
    ("overrides", "message"),
    [
        ({"lr_schedule": "linear"}, "train_engine.lr_schedule=linear: must be one of constant, cosine."),
        ({"micro_batch_size": 0}, "train_engine.micro_batch_size=0: must be >= 1"),
        ({"log_prob_micro_batch_size": 0}, "train_engine.log_prob_micro_batch_size=0: must be >= 1 (or null)"),
        ({"betas": [0.9]}, "train_engine.betas=[0.9]: must be two values in [0, 1)"),
        ({"betas": [0.9, 1.0]}, "train_engine.betas=[0.9, 1.0]: must be two values in [0, 1)"),
        ({"grad_clip": -1.0}, "train_engine.grad_clip=-1.0: must be in [0, inf)"),
        ({"warmup_steps": -1}, "train_engine.warmup_steps=-1: must be >= 0"),
        ({"eps": 0.0}, "train_engine.eps=0.0: must be in (0, inf)"),
        ({"eps": float("nan")}, "train_engine.eps=nan: must be in (0, inf)"),
        ({"lr": float("inf")}, "train_engine.lr=inf: must be in [0, inf)"),
        ({"min_lr_ratio": 1.5}, "train_engine.min_lr_ratio=1.5: must be in [0, 1]"),
        ({"head_chunk_rows": -1}, "train_engine.head_chunk_rows=-1: must be >= 0"),
    ],
)
def test_invalid_config_names_the_field(overrides, message):
    with pytest.raises(ValueError) as error:
        FSDPConfig(**overrides)
    assert str(error.value) == message


def test_config_is_a_hydra_structured_config():
    schema = OmegaConf.structured(FSDPConfig)
    merged = OmegaConf.merge(schema, {"lr": 3e-6, "betas": [0.9, 0.95], "log_prob_micro_batch_size": 16})
    cfg = OmegaConf.to_object(merged)
    assert isinstance(cfg, FSDPConfig)
    assert (cfg.lr, list(cfg.betas), cfg.log_prob_micro_batch_size) == (3e-6, [0.9, 0.95], 16)
    with pytest.raises(ValueError, match="lr_schedule"):
        OmegaConf.to_object(OmegaConf.merge(schema, {"lr_schedule": "step"}))
