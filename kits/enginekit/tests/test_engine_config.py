"""rlloom_enginekit.engine_config: the LR schedule formula, the settings checks, and that an engine's
config modules import no torch."""

from __future__ import annotations

import math
import subprocess
import sys

import pytest

from rlloom_enginekit.engine_config import TrainEngineConfig, lr_factor


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


def test_dtype_and_critic_lr():
    with pytest.raises(ValueError, match=r"^train_engine\.dtype=int8: must be one of auto, float32, bfloat16, float16\.$"):
        TrainEngineConfig(dtype="int8")
    cfg = TrainEngineConfig(lr=1e-6, critic_lr=1e-5, warmup_steps=2)
    assert (cfg.base_lr("actor"), cfg.base_lr("critic")) == (1e-6, 1e-5)
    assert cfg.lr_at(1, "critic", total_steps=10) == pytest.approx(0.5e-5)


def test_config_modules_import_no_torch():
    code = ("import sys, rlloom_enginekit, rlloom_enginekit.choices, rlloom_enginekit.engine_config; "
            "print('torch' in sys.modules)")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert done.stdout.strip() == "False"
