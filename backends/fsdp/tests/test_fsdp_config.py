"""FSDPConfig validation, its use as a Hydra structured config, and the LR schedule formula."""

from __future__ import annotations

import math

import pytest
from omegaconf import OmegaConf

from rlloom_fsdp import FSDPConfig
from rlloom.engine_config import lr_factor


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


def test_constant_schedule_with_linear_warmup():
    factors = [
        lr_factor(k, schedule="constant", warmup_steps=4, total_steps=0, min_lr_ratio=0.0) for k in range(1, 7)
    ]
    assert factors == pytest.approx([0.25, 0.5, 0.75, 1.0, 1.0, 1.0])


def test_cosine_schedule_without_warmup():
    def factor(k):
        return lr_factor(k, schedule="cosine", warmup_steps=0, total_steps=10, min_lr_ratio=0.0)

    # progress (k - 1) / 10: full LR first, half way at step 6, the floor from step 11 on
    assert factor(1) == pytest.approx(1.0)
    assert factor(6) == pytest.approx(0.5)
    assert factor(10) == pytest.approx(0.5 * (1 + math.cos(math.pi * 0.9)))
    assert factor(11) == pytest.approx(0.0, abs=1e-12)
    assert factor(50) == pytest.approx(0.0, abs=1e-12)


def test_schedule_rejects_bad_arguments():
    with pytest.raises(ValueError, match="1-based"):
        lr_factor(0, schedule="constant", warmup_steps=0, total_steps=0, min_lr_ratio=0.0)
    with pytest.raises(ValueError, match="total_steps > warmup_steps"):
        lr_factor(5, schedule="cosine", warmup_steps=4, total_steps=4, min_lr_ratio=0.0)
