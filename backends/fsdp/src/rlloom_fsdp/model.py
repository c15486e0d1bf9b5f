"""Loading a Hugging Face causal LM, sharding it with FSDP2, and reading its full weights back."""

from __future__ import annotations

from collections.abc import Iterator

import torch
from torch import nn
from torch.distributed.device_mesh import DeviceMesh
from torch.distributed.fsdp import fully_shard
from torch.distributed.tensor import DTensor
from transformers import AutoModelForCausalLM, PreTrainedModel


def load_model(path: str, *, trainable: bool, gradient_checkpointing: bool) -> PreTrainedModel:
    """``AutoModelForCausalLM`` from the local folder ``path`` in float32, KV cache off.

    A frozen model (``trainable=False``) has ``requires_grad`` off everywhere and is in eval mode.
    """
    model = AutoModelForCausalLM.from_pretrained(path, dtype=torch.float32)
    model.config.use_cache = False
    if not trainable:
        model.requires_grad_(False)
        model.eval()
    elif gradient_checkpointing:
        # transformers renamed gradient_checkpointing_enable (deprecated since 5.x, removed in v6).
        enable = getattr(model, "activation_checkpointing_enable", None) or model.gradient_checkpointing_enable
        enable({"use_reentrant": False})
    return model


def decoder_layers(model: PreTrainedModel) -> list[nn.Module]:
    """The model's transformer blocks: modules whose class is named in ``model._no_split_modules``.

    Assumption: the model declares its block class there, as Hugging Face causal LMs do (e.g.
    ``Qwen2DecoderLayer``, ``LlamaDecoderLayer``; the blocks live in ``model.model.layers``).
    """
    names = set(getattr(model, "_no_split_modules", None) or [])
    layers = [module for module in model.modules() if type(module).__name__ in names]
    if not layers:
        raise ValueError(
            f"cannot find the decoder layers of {type(model).__name__}: no module's class is listed in "
            f"its _no_split_modules ({sorted(names)}); rlloom-fsdp shards each decoder layer separately"
        )
    return layers


def shard_model(model: nn.Module, mesh: DeviceMesh, *, reshard_after_forward: bool) -> None:
    """Apply FSDP2 in place: one ``fully_shard`` unit per decoder layer, then the root (embeddings,
    final norm, LM head). Parameter names (``state_dict`` keys) do not change."""
    for layer in decoder_layers(model):
        fully_shard(layer, mesh=mesh, reshard_after_forward=reshard_after_forward)
    fully_shard(model, mesh=mesh)


def full_named_tensors(model: nn.Module) -> Iterator[tuple[str, torch.Tensor]]:
    """``(name, full tensor on CPU)`` for every entry of ``model.state_dict()``, one at a time.

    Names are the unsharded model's ``state_dict`` keys. A tensor shared under two names (tied
    input embedding and LM head) is yielded once, under its first name (``model.embed_tokens.weight``;
    ``lm_head.weight`` is left out), as ``save_pretrained`` does. Each tensor is a fresh copy. Every
    rank must iterate to the end together: gathering a shard is a collective.
    """
    seen: set[int] = set()
    for name, tensor in model.state_dict(keep_vars=True).items():
        if id(tensor) in seen:
            continue
        seen.add(id(tensor))
        full = tensor.full_tensor() if isinstance(tensor, DTensor) else tensor
        yield name, full.detach().to("cpu", copy=True)
