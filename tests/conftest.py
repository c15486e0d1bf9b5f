"""Shared fixtures for the cross-package tests: real plugins, the tiny offline model."""

from __future__ import annotations

import pytest
import torch


@pytest.fixture(scope="session")
def tiny_model_path(tmp_path_factory) -> str:
    """The model of ``preset=tiny`` (a tiny random-init Qwen2 folder with the byte tokenizer, built offline by
    ``model=tiny`` with the preset's settings), in a cache of its own: a run of ``preset=tiny`` given
    ``model.cache_dir=<its parent>`` trains this very folder."""
    from rlloom.config import compose_config
    from rlloom.plugins.registry import get_registry

    cache = tmp_path_factory.mktemp("rlloom-cache")
    model = compose_config(["preset=tiny", f"model.cache_dir={cache}"]).sections["model"]
    return get_registry().build("model", "tiny", model)


@pytest.fixture(autouse=True)
def _one_thread():
    previous = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(previous)
