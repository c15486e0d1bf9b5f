"""Shared fixtures for the cross-package tests: real plugins, the tiny offline model."""

from __future__ import annotations

import pytest
import torch


@pytest.fixture(scope="session")
def tiny_model_path(tmp_path_factory) -> str:
    """A tiny random-init Qwen2 folder with the byte tokenizer, built offline by ``model=tiny``."""
    from rlloom_models.config import TinyModelConfig
    from rlloom_models.tiny import tiny_model_path as build_tiny

    return build_tiny(TinyModelConfig(cache_dir=str(tmp_path_factory.mktemp("rlloom-cache"))))


@pytest.fixture(autouse=True)
def _one_thread():
    previous = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(previous)
