"""The ``models`` entry point: what it registers, its config schemas under OmegaConf, cheap import."""

from __future__ import annotations

import subprocess
import sys

import pytest
from omegaconf import OmegaConf
from omegaconf.errors import ValidationError

from rlloom.plugins.registry import Registry
from rlloom_models.config import HFModelConfig, SmolLM2Config, TinyModelConfig


def test_entry_point_registers_the_three_sources(tmp_path):
    registry = Registry()
    status = next(s for s in registry.statuses if s.entry_point == "models")
    assert status.status == "loaded", status.traceback
    assert status.distribution == "rlloom-models"
    registered = {c.name: c.config for c in status.components}
    assert registered == {"tiny": TinyModelConfig, "smollm2-135m": SmolLM2Config, "hf": HFModelConfig}
    assert all(c.kind == "model" for c in status.components)
    path = registry.build("model", "tiny", TinyModelConfig(cache_dir=str(tmp_path)))
    assert path.startswith(str(tmp_path / "models" / "tiny-"))


def test_configs_are_hydra_structured_configs():
    cfg = OmegaConf.merge(OmegaConf.structured(TinyModelConfig), {"hidden_size": 32, "seed": 3})
    built = OmegaConf.to_object(cfg)
    assert built == TinyModelConfig(hidden_size=32, seed=3)
    with pytest.raises(ValidationError):
        OmegaConf.merge(OmegaConf.structured(TinyModelConfig), {"hidden_size": "big"})
    assert OmegaConf.to_object(OmegaConf.structured(SmolLM2Config)) == SmolLM2Config(cache_dir=None)


def test_invalid_tiny_config_fails_when_built_from_omegaconf():
    cfg = OmegaConf.merge(OmegaConf.structured(TinyModelConfig), {"num_heads": 3})
    with pytest.raises(ValueError, match="model.hidden_size \\(64\\) must be divisible by model.num_heads \\(3\\)"):
        OmegaConf.to_object(cfg)


def test_importing_the_plugin_does_not_import_transformers():
    code = "import sys, rlloom_models.plugin; print('transformers' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, check=True)
    assert out.stdout.strip() == "False"
