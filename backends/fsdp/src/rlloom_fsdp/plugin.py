"""Entry point ``fsdp``: registers the train engine ``train_engine=fsdp`` and ``preset=lora``.

The engine module is named, not imported: it loads when an engine is built, so registering the
plugin (and reporting a config error) stays cheap."""

from __future__ import annotations

import rlloom
from rlloom_fsdp.config import FSDPConfig

LORA_PRESET = ["train_engine=fsdp", "train_engine.lora.rank=16", "train_engine.lora.alpha=32", "train_engine.lr=2e-4",
               "train_engine.gradient_checkpointing=true", "trainer.run_name=grpo-arithmetic-smollm2-135m-lora"]
"""The main job with LoRA adapters (docs/lora.md): rank 16, alpha 32 on every linear layer, at the learning rate
adapters need (20x the full fine-tuning run's 1e-5), with gradient checkpointing (the activations are what LoRA
leaves of full fine-tuning's memory; QLoRA and PEFT's ``prepare_model_for_kbit_training`` turn it on too), in a run
folder of its own."""


@rlloom.hookimpl
def register_train_engines(register):
    register("fsdp", "rlloom_fsdp.engine:FSDPTrainEngine", config=FSDPConfig)


@rlloom.hookimpl
def register_presets(register):
    register("lora", LORA_PRESET, "the main job (SmolLM2 learns addition) training LoRA adapters (docs/lora.md)")
