"""``FSDPConfig``: the typed config of ``train_engine=fsdp`` (a Hydra structured config)."""

from __future__ import annotations

import json
import os
from dataclasses import dataclass
from typing import ClassVar

from rlloom_enginekit.choices import LAYOUTS
from rlloom_enginekit.engine_config import TrainEngineConfig


PACKED_ATTENTION = ("sdpa", "eager")
"""Attention implementations that take the packed layouts' 4D mask."""

ATTENTION_CHOICES = ("sdpa", "flex", "varlen")
"""``train_engine.attention`` choices (:mod:`rlloom_fsdp.attention`)."""


def check_attention(attention: str, device_type: str, trainable: bool) -> None:
    """ValueError for ``attention=flex`` on an engine that trains on the CPU: torch's FlexAttention
    has no backward there (its no-grad forward, a reference model's, runs)."""
    if attention == "flex" and trainable and device_type == "cpu":
        raise ValueError("train_engine.attention=flex trains on a CUDA GPU only (torch's FlexAttention has no "
                         "backward on the CPU); set train_engine.attention=sdpa")


def read_model_config(model_path: str) -> dict:
    """The model folder's ``config.json`` ({} when missing or broken: the model loader reports it)."""
    try:
        with open(os.path.join(model_path, "config.json"), encoding="utf-8") as handle:
            return json.load(handle)
    except (OSError, ValueError):
        return {}


def asked_attention(config: dict) -> str | None:
    """The attention implementation a model's ``config.json`` (a dict) asks for, if any."""
    return config.get("attn_implementation") or config.get("_attn_implementation")


def check_sequence_parallel(size: int, heads: int | None, kv_heads: int | None, world: int) -> None:
    """ValueError, naming ``train_engine.sequence_parallel_size``, unless ``size`` divides the model's
    attention heads and key/value heads (each rank of a sequence-parallel group attends with its
    share of both) and the engine's world size (the groups are data-parallel replicas); ``None``:
    not known here, not checked."""
    key = f"train_engine.sequence_parallel_size={size}"
    for name, count in (("num_attention_heads", heads), ("num_key_value_heads", kv_heads)):
        if count is not None and count % size:
            raise ValueError(f"{key} must divide the model's {name} ({count}): each rank of a sequence-parallel "
                             "group attends with an equal share of the heads")
    if world % size:
        raise ValueError(f"{key} must divide the train engine's world size ({world}; sequence parallel × data "
                         f"parallel = world): run it on a multiple of {size} processes, e.g. "
                         f"launcher=ray +launcher.resource_pools.global={size}")


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
    ``attention``: how the packed layouts compute attention (:mod:`rlloom_fsdp.attention`): ``sdpa``
    (default) gives the model's own SDPA (or eager) attention a dense ``[k, 1, W, W]`` mask; ``flex``
    runs torch's FlexAttention over a block mask of the packing (compiled on a GPU at the first steps,
    skips the masked-out blocks, no repeated K/V heads); it needs a packed ``sequence_layout`` and, to
    train, a CUDA GPU; ``varlen`` runs causal SDPA on each sequence of the packing alone (no mask, memory
    O(W) instead of W², on the CPU and a GPU; one kernel call per sequence and layer; it replaces the
    model's attention, and refuses models with attention softcapping, sliding windows or sinks); it
    needs a packed ``sequence_layout``. With sequence parallelism ``varlen`` keeps the mask, which SP
    does not split, off every rank.

    ``sequence_parallel_size`` (SP): Ulysses sequence parallelism (:mod:`rlloom_fsdp.sequence_parallel`):
    the engine's ranks form groups of SP consecutive ranks; a group runs one micro-batch together,
    each rank holding 1/SP of its packed tokens, and attention trades sequence for heads with an
    all-to-all. SP must divide the world size (the groups are the data-parallel replicas: SP × DP =
    world) and the model's attention and key/value heads, and it needs a packed ``sequence_layout``.
    ``max_tokens_per_micro_batch`` then counts a group's tokens.

    On CUDA gradients are reduced in float32 whatever ``dtype`` is. ``head_chunk_rows``: response
    tokens per chunk of the LM head in the log-prob and entropy computation
    (:func:`rlloom_fsdp.head.chunked_log_probs`; 0: :func:`rlloom_fsdp.head.default_chunk_rows`).

    ``lora``: LoRA adapters through PEFT (:mod:`rlloom_fsdp.lora`, docs/lora.md): the actor trains only
    them, serves the reference policy with them off (no reference engine) and syncs W0 + (alpha/r) B A.
    """

    limits: ClassVar[dict] = {"sequence_layout": LAYOUTS, "attention": ATTENTION_CHOICES, "head_chunk_rows": ">= 0",
                              "sequence_parallel_size": ">= 1"}
    # A checkpoint does not depend on the sequence-parallel size, so one process (``rlloom export``) reads it at SP = 1.
    single_process_overrides: ClassVar[dict] = {"sequence_parallel_size": 1}
    lora_refusal: ClassVar[str] = ""

    reshard_after_forward: bool = True  # free each layer's gathered weights after forward (ZeRO-3); False: ZeRO-2
    sequence_layout: str = "shared_prompt"  # shared_prompt (each prompt once per group), packed, padded: same numbers
    attention: str = "sdpa"  # packed layouts: sdpa (dense mask), flex (block mask; trains on CUDA), varlen (no mask)
    head_chunk_rows: int = 0  # response tokens per LM-head chunk for log-probs/entropy; 0: automatic
    sequence_parallel_size: int = 1  # ranks sharing each micro-batch by its tokens (Ulysses); divides world and heads

    def __post_init__(self) -> None:
        super().__post_init__()
        for key, value in (("attention", self.attention), ("sequence_parallel_size", self.sequence_parallel_size)):
            if value not in ("sdpa", 1) and self.sequence_layout == "padded":
                raise ValueError(f"train_engine.{key}={value} needs a packed train_engine.sequence_layout "
                                 "(shared_prompt or packed), got padded")

    def reference_from_actor(self) -> bool:
        """With LoRA on the actor serves the reference (:class:`rlloom_enginekit.lora.ServesReference`)."""
        return self.lora.enabled

    def check_model(self, model_path: str, run_device: str) -> None:
        """Before any weights load: a ValueError when a packed ``sequence_layout`` meets a model whose
        ``config.json`` asks for an attention implementation that cannot take its per-sequence mask
        (e.g. ``flash_attention_2``; ``attention=flex`` replaces the model's attention, whatever it asks),
        when ``attention=flex`` would train on the CPU (:func:`check_attention`), or when
        ``lora.target_modules`` names a module the model has no linear layer for
        (:func:`rlloom_fsdp.lora.check_lora_targets`, on the model built without weights)."""
        if self.lora.enabled:
            from rlloom_fsdp.lora import check_lora_targets  # torch and transformers load only for this check

            check_lora_targets(self.lora, model_path)
        if self.attention == "flex":
            from rlloom_enginekit.devices import role_device  # torch loads only for this check

            check_attention(self.attention, role_device(self.device, run_device, "train_engine.device").type, True)
        config = read_model_config(model_path)
        asked = asked_attention(config)
        dense = self.sequence_layout != "padded" and self.attention == "sdpa"
        if dense and asked is not None and asked not in PACKED_ATTENTION:
            raise ValueError(
                f"train_engine.sequence_layout={self.sequence_layout} needs one of the attention implementations "
                f"{list(PACKED_ATTENTION)}; the model at {model_path} asks for {asked!r}: set "
                "train_engine.sequence_layout=padded"
            )
