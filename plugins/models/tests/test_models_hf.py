"""``model=hf``: local folders are validated, hub ids pass through unchanged."""

from __future__ import annotations

import os

import pytest
from omegaconf import OmegaConf

from rlloom_models.config import HFModelConfig
from rlloom_models.errors import ModelSourceError
from rlloom_models.plugin import hf


def test_local_folder_with_config_is_returned_absolute(tmp_path, monkeypatch):
    (tmp_path / "m").mkdir()
    (tmp_path / "m" / "config.json").write_text("{}")
    assert hf(HFModelConfig(path=str(tmp_path / "m"))) == str(tmp_path / "m")
    monkeypatch.chdir(tmp_path)
    assert hf(HFModelConfig(path="m")) == str(tmp_path / "m")
    assert hf(HFModelConfig(path="./m")) == str(tmp_path / "m")


def test_home_relative_folder(tmp_path, monkeypatch):
    monkeypatch.setenv("HOME", str(tmp_path))
    (tmp_path / "m").mkdir()
    (tmp_path / "m" / "config.json").write_text("{}")
    assert hf(HFModelConfig(path="~/m")) == os.path.join(str(tmp_path), "m")


def test_folder_without_config_json(tmp_path):
    with pytest.raises(ModelSourceError, match=r"model.path=.* has no config.json"):
        hf(HFModelConfig(path=str(tmp_path)))


def test_file_instead_of_folder(tmp_path):
    (tmp_path / "weights.safetensors").write_text("")
    with pytest.raises(ModelSourceError, match="is a file"):
        hf(HFModelConfig(path=str(tmp_path / "weights.safetensors")))


@pytest.mark.parametrize("path", ["/no/such/folder", "./missing", "~/missing-rlloom-model", "a b/c", "org/name/extra"])
def test_neither_folder_nor_hub_id(path, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    with pytest.raises(ModelSourceError, match="no such folder, and not a Hugging Face id"):
        hf(HFModelConfig(path=path))


@pytest.mark.parametrize("hub_id", ["Qwen/Qwen2.5-0.5B-Instruct", "HuggingFaceTB/SmolLM2-135M-Instruct", "gpt2"])
def test_hub_id_passes_through(hub_id, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    assert hf(HFModelConfig(path=hub_id)) == hub_id


def test_path_is_required():
    assert OmegaConf.is_missing(OmegaConf.structured(HFModelConfig), "path")
    with pytest.raises(ModelSourceError, match="model.path is required"):
        hf(HFModelConfig())
