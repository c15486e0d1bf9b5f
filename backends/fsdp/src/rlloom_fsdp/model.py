"""Loading a Hugging Face causal LM (or a critic built on one), sharding it with FSDP2, and reading
its full weights back."""

from __future__ import annotations

from collections.abc import Iterator

import torch
from torch import nn
from torch.distributed.device_mesh import DeviceMesh
from torch.distributed.fsdp import MixedPrecisionPolicy, fully_shard
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


class CriticModel(nn.Module):
    """A value model: the causal LM's base transformer (no LM head) and a ``Linear(hidden, 1)`` head.

    ``forward(input_ids, attention_mask, position_ids)`` returns one value per position [B, T]:
    ``value_head(last_hidden_state)`` (the base model's final hidden states, after its final norm).

    Parameter names: the base model keeps its causal-LM names (``<base_model_prefix>.…``, e.g.
    ``model.layers.0.mlp.up_proj.weight``; the LM head is dropped), the head adds
    ``value_head.weight`` [1, hidden] and ``value_head.bias`` [1], float32. The head starts at
    **zero** (weight and bias), so every rank starts from the same head without sharing a seed and
    the first values are 0 (a neutral baseline); verl initialises a fresh token-classification head
    randomly instead.
    """

    def __init__(self, lm: PreTrainedModel) -> None:
        super().__init__()
        self.base_model_prefix = lm.base_model_prefix
        self._no_split_modules = list(getattr(lm, "_no_split_modules", None) or [])
        setattr(self, self.base_model_prefix, lm.base_model)
        hidden = lm.config.get_text_config().hidden_size
        self.value_head = nn.Linear(hidden, 1, dtype=torch.float32)
        nn.init.zeros_(self.value_head.weight)
        nn.init.zeros_(self.value_head.bias)

    @property
    def base(self) -> nn.Module:
        """The causal LM's base transformer."""
        return getattr(self, self.base_model_prefix)

    def value(self, hidden: torch.Tensor) -> torch.Tensor:
        """``value_head(hidden)`` float32 for final hidden states [..., H] -> [...]."""
        # h · w + b as a matrix-vector product: a fresh tensor, not a view of [..., 1]
        # (FSDP warns that in-place ops on a view returned by a sharded module skip its hooks).
        head = self.value_head
        return hidden.float() @ head.weight[0].float() + head.bias.float()

    def forward(
        self, input_ids: torch.Tensor, attention_mask: torch.Tensor, position_ids: torch.Tensor
    ) -> torch.Tensor:
        hidden = self.base(
            input_ids=input_ids, attention_mask=attention_mask, position_ids=position_ids, use_cache=False
        ).last_hidden_state
        return self.value(hidden)


def load_critic(path: str, *, gradient_checkpointing: bool) -> CriticModel:
    """A trainable :class:`CriticModel` on the causal LM in the local folder ``path``."""
    return CriticModel(load_model(path, trainable=True, gradient_checkpointing=gradient_checkpointing))


def decoder_layers(model: nn.Module) -> list[nn.Module]:
    """The model's transformer blocks: modules whose class is named in ``model._no_split_modules``.

    Assumption: the model (a causal LM, or a :class:`CriticModel`, which copies its LM's list) declares its block class there, as Hugging Face causal LMs do (e.g.
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


def shard_model(
    model: nn.Module, mesh: DeviceMesh, *, reshard_after_forward: bool, compute_dtype: torch.dtype
) -> None:
    """Apply FSDP2 in place: one ``fully_shard`` unit per decoder layer, then the root (embeddings,
    final norm, LM head), on ``mesh``'s device (parameters move there). Parameter names
    (``state_dict`` keys) do not change.

    Parameters stay in their loaded dtype (float32: the master weights the optimizer updates);
    with a ``compute_dtype`` other than float32 FSDP2 all-gathers them cast to it, runs forward and
    backward in it and reduce-scatters gradients in float32 (``MixedPrecisionPolicy``).

    A one-rank mesh with float32 compute has nothing to shard or cast: the model only moves to the
    mesh's device and stays a plain module (FSDP2 would still copy every parameter into an
    all-gather buffer for each forward and backward: about a quarter of a CPU train step on
    SmolLM2-135M, measured with ``bench/bench_train_step.py``)."""
    if mesh.size() == 1 and compute_dtype == torch.float32:
        model.to(mesh.device_type)
        return
    policy = MixedPrecisionPolicy() if compute_dtype == torch.float32 else MixedPrecisionPolicy(
        param_dtype=compute_dtype, reduce_dtype=torch.float32
    )
    for layer in decoder_layers(model):
        fully_shard(layer, mesh=mesh, reshard_after_forward=reshard_after_forward, mp_policy=policy)
    fully_shard(model, mesh=mesh, mp_policy=policy)


def full_named_tensors(model: nn.Module) -> Iterator[tuple[str, torch.Tensor]]:
    """``(name, full tensor)`` for every entry of ``model.state_dict()``, one at a time, on the
    device the parameters live on.

    Names are the unsharded model's ``state_dict`` keys. A tensor shared under two names (tied
    input embedding and LM head) is yielded once, under its first name (``model.embed_tokens.weight``;
    ``lm_head.weight`` is left out), as ``save_pretrained`` does. Each tensor is a fresh copy
    (:func:`full_copy`: on a one-rank mesh no collective per tensor). Every rank must iterate to the
    end together: gathering a shard is a collective.
    """
    seen: set[int] = set()
    for name, tensor in model.state_dict(keep_vars=True).items():
        if id(tensor) in seen:
            continue
        seen.add(id(tensor))
        yield name, full_copy(tensor.detach())


def full_copy(tensor: torch.Tensor) -> torch.Tensor:
    """A new tensor holding the whole of ``tensor``: a DTensor's shards gathered (``full_tensor``,
    an all-gather into new memory), or a clone when this rank holds it all (a plain tensor, or a
    DTensor on a one-rank mesh). The choice depends on the mesh only, never on a rank's shard, so
    every rank joins the same collectives."""
    if isinstance(tensor, DTensor):
        if tensor.device_mesh.size() > 1:
            return tensor.full_tensor()
        tensor = tensor.to_local()
    return tensor.clone()
