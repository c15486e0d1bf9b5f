"""``FSDPConfig``: the typed config of ``train_engine=fsdp`` (a Hydra structured config)."""

from __future__ import annotations

import json
import os
from dataclasses import dataclass

from rlloom_enginekit.choices import LAYOUTS
from rlloom_enginekit.engine_config import TrainEngineConfig


PACKED_ATTENTION = ("sdpa", "eager")
"""Attention implementations that take the packed layouts' 4D mask."""


def asked_attention(model_path: str) -> str | None:
    """The attention implementation the model folder's ``config.json`` asks for, if any."""
    try:
        with open(os.path.join(model_path, "config.json"), encoding="utf-8") as handle:
            config = json.load(handle)
    except (OSError, ValueError):
        return None  # the model loader reports a missing or broken config
    return config.get("attn_implementation") or config.get("_attn_implementation")


@dataclass
class FSDPConfig(TrainEngineConfig):
    """The FSDP2 train engine: the settings every train engine has (optimizer, LR schedule,
    micro-batching, device, dtype: :class:`rlloom_enginekit.engine_config.TrainEngineConfig`) and its own.

    ``reshard_after_forward``: free the gathered parameters of each
    decoder layer after its forward (FSDP2's ZeRO-3 behaviour; ``False`` keeps them until backward,
    like ZeRO-2). ``sequence_layout``: how a micro-batch's rows enter the model
    (:mod:`rlloom_enginekit.packing`): ``shared_prompt`` (default) drops padding and runs each distinct prompt
    once, its responses attending to it (the n responses of a GRPO group share one prompt forward);
    ``packed`` drops padding only; ``padded`` is the plain ``[b, P + R]`` forward. The three give
    the same numbers up to summation order; the packed ones need SDPA or eager attention.

    On CUDA gradients are reduced in float32 whatever ``dtype`` is. ``head_chunk_rows``: response
    tokens per chunk of the LM head in the log-prob and entropy computation
    (:func:`rlloom_fsdp.head.chunked_log_probs`; 0: :func:`rlloom_fsdp.head.default_chunk_rows`).
    """

    reshard_after_forward: bool = True
    sequence_layout: str = "shared_prompt"
    head_chunk_rows: int = 0

    def __post_init__(self) -> None:
        super().__post_init__()
        if self.sequence_layout not in LAYOUTS:
            raise ValueError(f"train_engine.sequence_layout must be one of {list(LAYOUTS)}, "
                             f"got {self.sequence_layout!r}")
        if self.head_chunk_rows < 0:
            raise ValueError(f"train_engine.head_chunk_rows must be >= 0 (0: automatic), got {self.head_chunk_rows}")

    def check_model(self, model_path: str, run_device: str) -> None:
        """Before any weights load: a ValueError when a packed ``sequence_layout`` meets a model whose
        ``config.json`` asks for an attention implementation that cannot take its per-sequence mask
        (e.g. ``flash_attention_2``)."""
        asked = asked_attention(model_path)
        if self.sequence_layout != "padded" and asked is not None and asked not in PACKED_ATTENTION:
            raise ValueError(
                f"train_engine.sequence_layout={self.sequence_layout} needs one of the attention implementations "
                f"{list(PACKED_ATTENTION)}; the model at {model_path} asks for {asked!r}: set "
                "train_engine.sequence_layout=padded"
            )
