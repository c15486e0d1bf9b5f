"""The ``rlloom`` entry point ``models``: registers the model sources ``tiny``, ``smollm2-135m``, ``hf``.

Each factory takes its config dataclass and returns the path of a local Hugging Face folder (or,
for ``hf``, a hub id). Importing this module is cheap; transformers is imported when a factory runs.
"""

from __future__ import annotations

import rlloom

from rlloom_models.config import HFModelConfig, SmolLM2Config, TinyModelConfig


def tiny(cfg: TinyModelConfig) -> str:
    from rlloom_models.tiny import tiny_model_path

    return tiny_model_path(cfg)


def smollm2_135m(cfg: SmolLM2Config) -> str:
    from rlloom_models.smollm2 import smollm2_path

    return smollm2_path(cfg.cache_dir)


def hf(cfg: HFModelConfig) -> str:
    from rlloom_models.hf import hf_model_path

    return hf_model_path(cfg.path)


@rlloom.hookimpl
def register_models(register):
    register("tiny", tiny, config=TinyModelConfig)
    register("smollm2-135m", smollm2_135m, config=SmolLM2Config)
    register("hf", hf, config=HFModelConfig)
