"""LoRA adapters on the FSDP engine's causal LM through PEFT (``train_engine.lora``; the formula:
:mod:`rlloom_enginekit.lora`).

PEFT injects its LoRA layers into the Hugging Face model in place (``peft.inject_adapter_in_model``):
each targeted ``nn.Linear`` at ``<name>`` becomes a wrapper holding the frozen layer at
``<name>.base_layer`` and the adapter at ``<name>.lora_A.default`` / ``<name>.lora_B.default``; the
model keeps its class, so the engine's forward, chunked LM head and FSDP2 sharding per decoder layer
are unchanged. Only the adapters require grad.

Outside the engine no adapter name is ever seen: :func:`merged_named_tensors` streams the weights under
the base model's names with W = W0 + (alpha / r) · B A, computed per tensor from full copies (the
module itself is never merged); :func:`adapters_off` runs the base model W0 (the reference policy).
"""

from __future__ import annotations

import contextlib
import json
import os
from collections.abc import Iterator

import torch
from torch import nn

from rlloom_enginekit.lora import (ADAPTER_CONFIG, ADAPTER_NAME, ADAPTER_WEIGHTS, LoraConfig, check_targets, engine_key,
                                   peft_key)
from rlloom_fsdp.model import full_copy

BASE_LAYER = ".base_layer"


def linear_names(model: nn.Module) -> list[str]:
    """The dotted names of ``model``'s ``nn.Linear`` modules that can take adapters: all but the output
    layer (the LM head, whose weight the chunked head reads directly)."""
    head = model.get_output_embeddings()
    return [name for name, module in model.named_modules() if isinstance(module, nn.Linear) and module is not head]


def check_lora_targets(lora: LoraConfig, model_path: str) -> None:
    """ValueError, before any weights load, when ``lora.target_modules`` names no linear layer of the model in
    ``model_path`` (built on the meta device from its ``config.json``), or when ``lora.adapter_path`` is not
    a PEFT LoRA folder of the same rank (:func:`adapter_settings`)."""
    from transformers import AutoConfig, AutoModelForCausalLM

    with torch.device("meta"):
        model = AutoModelForCausalLM.from_config(AutoConfig.from_pretrained(model_path))
    check_targets(lora.target_modules, linear_names(model))
    if lora.adapter_path is not None:
        adapter_settings(lora)


def adapter_settings(lora: LoraConfig) -> dict:
    """The ``adapter_config.json`` of ``lora.adapter_path``; ValueError unless it is a LoRA adapter of rank
    ``lora.rank`` with its weights in ``adapter_model.safetensors``."""
    path = lora.adapter_path
    config_file, weights = os.path.join(path, ADAPTER_CONFIG), os.path.join(path, ADAPTER_WEIGHTS)
    if not (os.path.isfile(config_file) and os.path.isfile(weights)):
        raise ValueError(f"train_engine.lora.adapter_path={path}: not a PEFT adapter folder (needs {ADAPTER_CONFIG} "
                         f"and {ADAPTER_WEIGHTS}, as `rlloom export` writes)")
    with open(config_file, encoding="utf-8") as handle:
        settings = json.load(handle)
    if settings.get("peft_type") != "LORA" or settings.get("r") != lora.rank:
        raise ValueError(f"train_engine.lora.adapter_path={path}: a {settings.get('peft_type')} adapter of rank "
                         f"{settings.get('r')}; train_engine.lora.rank={lora.rank} needs a LORA adapter of that rank")
    return settings


def peft_config(lora: LoraConfig, base_model: str | None = None):
    """The ``peft.LoraConfig`` of ``lora`` (PEFT's ``all-linear`` leaves the LM head out, as
    :func:`linear_names` does)."""
    import peft

    return peft.LoraConfig(r=lora.rank, lora_alpha=lora.alpha, lora_dropout=lora.dropout, bias="none",
                           target_modules=lora.target_modules, base_model_name_or_path=base_model)


def add_adapters(model: nn.Module, lora: LoraConfig) -> None:
    """Inject ``lora``'s adapters into ``model`` in place (A random, B zero: the policy starts at W0, or at
    ``lora.adapter_path``'s adapters), freeze everything else."""
    import peft

    check_targets(lora.target_modules, linear_names(model))
    peft.inject_adapter_in_model(peft_config(lora), model, adapter_name=ADAPTER_NAME)
    for name, parameter in model.named_parameters():
        parameter.requires_grad_(".lora_" in name)
    if lora.adapter_path is not None:
        load_adapter(model, lora)


def load_adapter(model: nn.Module, lora: LoraConfig) -> None:
    """Copy ``lora.adapter_path``'s adapter tensors into ``model``'s; ValueError unless they are exactly
    the model's adapters (same targets and shapes)."""
    from safetensors.torch import load_file

    adapter_settings(lora)
    loaded = {engine_key(key): tensor for key, tensor in load_file(os.path.join(lora.adapter_path, ADAPTER_WEIGHTS)).items()}
    own = {name for name in model.state_dict() if ".lora_" in name}
    if set(loaded) != own:
        raise ValueError(f"train_engine.lora.adapter_path={lora.adapter_path}: its adapters "
                         f"({len(loaded)} tensors) do not match train_engine.lora.target_modules="
                         f"{lora.target_modules} ({len(own)} tensors), e.g. {sorted(set(loaded) ^ own)[:3]}")
    model.load_state_dict(loaded, strict=False)


@contextlib.contextmanager
def adapters_off(model: nn.Module) -> Iterator[None]:
    """Run ``model`` as its base model (every LoRA layer computes W0 x) inside the block."""
    from peft.tuners.tuners_utils import BaseTunerLayer

    layers = [module for module in model.modules() if isinstance(module, BaseTunerLayer)]
    for layer in layers:
        layer.enable_adapters(False)
    try:
        yield
    finally:
        for layer in layers:
            layer.enable_adapters(True)


def merged_named_tensors(model: nn.Module, scaling: float) -> Iterator[tuple[str, torch.Tensor]]:
    """``(base name, full tensor)`` for the merged model, one at a time: ``<name>.weight`` = W0 + ``scaling``
    · B A for each LoRA layer (its ``<name>.base_layer.bias`` as ``<name>.bias``), every other tensor as it
    is; adapter tensors are not yielded. Each is a fresh full copy (:func:`rlloom_fsdp.model.full_copy`: a
    collective when sharded, so every rank iterates to the end together); a tensor shared under two names
    is yielded once. ``scaling`` 0 gives the base weights W0 (no adapter tensor is gathered)."""
    state = model.state_dict(keep_vars=True)
    seen: set[int] = set()
    for name, tensor in state.items():
        if ".lora_" in name or id(tensor) in seen:
            continue
        seen.add(id(tensor))
        full = full_copy(tensor.detach())
        if scaling and name.endswith(BASE_LAYER + ".weight"):
            prefix = name.removesuffix(BASE_LAYER + ".weight")
            lora_a = full_copy(state[f"{prefix}.lora_A.{ADAPTER_NAME}.weight"].detach())
            lora_b = full_copy(state[f"{prefix}.lora_B.{ADAPTER_NAME}.weight"].detach())
            full.add_(lora_b @ lora_a, alpha=scaling)
        yield name.replace(BASE_LAYER + ".", "."), full


def adapter_tensors(model: nn.Module) -> Iterator[tuple[str, torch.Tensor]]:
    """The adapters' ``(engine name, full tensor)``, one at a time (a collective when sharded)."""
    for name, tensor in model.state_dict(keep_vars=True).items():
        if ".lora_" in name:
            yield name, full_copy(tensor.detach())


def write_adapter_folder(tensors: dict[str, torch.Tensor], lora: LoraConfig, base_model: str, out_dir: str) -> str:
    """Write ``tensors`` (engine names) as the PEFT folder ``out_dir`` (``adapter_config.json`` naming
    ``base_model``, ``adapter_model.safetensors`` under PEFT's names), through a temporary folder renamed
    at the end; returns ``out_dir``."""
    import shutil

    from rlloom_enginekit.safetensors_dir import save_tensors

    tmp_dir = out_dir + ".tmp"
    shutil.rmtree(tmp_dir, ignore_errors=True)
    os.makedirs(tmp_dir)
    peft_config(lora, base_model).save_pretrained(tmp_dir)
    save_tensors({peft_key(name): tensor.cpu().contiguous() for name, tensor in tensors.items()},
                 os.path.join(tmp_dir, ADAPTER_WEIGHTS))
    shutil.rmtree(out_dir, ignore_errors=True)
    os.replace(tmp_dir, out_dir)
    return out_dir

