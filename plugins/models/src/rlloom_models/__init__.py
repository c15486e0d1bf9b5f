"""rlloom-models: model sources for rlloom (``model=tiny``, ``model=smollm2-135m``, ``model=hf``).

Every source returns the path of a local Hugging Face folder that engines load with
``from_pretrained(path)``; built folders are cached (see :mod:`rlloom_models.cache`).
"""

from rlloom_models.cache import cache_root, cached_folder
from rlloom_models.config import HFModelConfig, SmolLM2Config, TinyModelConfig
from rlloom_models.errors import ModelSourceError

__all__ = [
    "HFModelConfig",
    "ModelSourceError",
    "SmolLM2Config",
    "TinyModelConfig",
    "cache_root",
    "cached_folder",
]
