"""Attention of the packed layouts (``train_engine.attention``): the dense masked SDPA the model
brings (``sdpa``), or torch's FlexAttention over a block mask of the packing (``flex``).

``sdpa`` hands the model's own SDPA (or eager) attention the packing's ``[k, 1, W, W]`` boolean mask
(:meth:`rlloom_enginekit.packing.Packing.attention_mask`): it computes all W² scores of every pack,
and since SDPA's masked kernels take no grouped-query heads transformers first repeats K and V to
the query heads. ``flex`` sets the model's attention implementation to :data:`FLEX` (registered
with transformers' ``AttentionInterface``), which runs ``torch.nn.attention.flex_attention`` with a
``BlockMask`` (:func:`packing_block_mask`): score blocks the mask leaves empty are skipped, K and V
keep their own heads (``enable_gqa``), and it gives the same values as the mask up to summation
order. Training with it needs a GPU: FlexAttention has no backward on the CPU.

Compilation: on a GPU the kernel is ``torch.compile(flex_attention)``, built once per process at the
first forward, compiled again once when a second pack shape arrives (then with dynamic shapes, so
later shapes reuse it; a micro-batch of a single pack is a shape of its own), and for each grad mode
(no-grad log-prob passes, training passes) and dtype. That warm-up falls in the first steps
(``bench/bench_train_step.py --attention flex`` reports its first step apart; compiling the forward
alone on the CPU took 17 s + 5 s). On the CPU flex runs uncompiled: torch's reference
implementation, which materializes the scores like the dense mask.
"""

from __future__ import annotations

import functools

import torch
from torch import nn
from torch.nn.attention.flex_attention import BlockMask, create_block_mask, flex_attention
from transformers import AttentionInterface

from rlloom_enginekit.packing import may_attend
from rlloom_fsdp.config import check_attention

FLEX = "rlloom_flex"
"""The attention implementation name :func:`flex_attention_forward` is registered under."""

ULYSSES = "rlloom_ulysses"
"""The prefix of the attention implementations sequence parallelism registers
(:func:`rlloom_fsdp.sequence_parallel.use_sequence_parallel`): ``rlloom_ulysses<n>:<kernel>``, an
all-to-all around the kernel ``<kernel>`` (``sdpa``, ``eager`` or :data:`FLEX`)."""

BLOCK = 128
"""FlexAttention's block size (``create_block_mask``'s default): the kernel may evaluate the mask for
slots up to the next multiple of it, so the tensors the mask reads are padded to one."""


def kernel_of(implementation: str) -> str:
    """The attention kernel a model's ``_attn_implementation`` runs: the ``<kernel>`` of a
    :data:`ULYSSES` name, else the name itself."""
    return implementation.partition(":")[2] if implementation.startswith(ULYSSES) else implementation


@functools.cache
def compiled_flex_attention():
    """``flex_attention`` compiled once per process (shapes turn dynamic at the first recompile)."""
    return torch.compile(flex_attention)


def packing_block_mask(segments: torch.Tensor, owners: torch.Tensor) -> BlockMask:
    """The block mask of a packing's ``segments`` and ``owners`` [k, W]: query slot q of pack b may
    see key slot j when ``may_attend(segments[b, q], owners[b, q], segments[b, j], q, j)``
    (:func:`rlloom_enginekit.packing.may_attend`, the rule of the dense mask)."""
    packs, width = segments.shape
    room = -width % BLOCK
    padded_segments = nn.functional.pad(segments, (0, room), value=-1)
    padded_owners = nn.functional.pad(owners, (0, room), value=-1)

    def visible(pack, head, query, key):
        return may_attend(padded_segments[pack, query], padded_owners[pack, query], padded_segments[pack, key],
                          query, key)

    return create_block_mask(visible, B=packs, H=None, Q_LEN=width, KV_LEN=width, device=segments.device)


def flex_attention_forward(
    module: nn.Module, query: torch.Tensor, key: torch.Tensor, value: torch.Tensor, attention_mask,
    scaling: float | None = None, dropout: float = 0.0, **kwargs,
) -> tuple[torch.Tensor, None]:
    """transformers' attention-function contract for :data:`FLEX`: ``query`` [k, Hq, W, D], ``key``
    and ``value`` [k, Hkv, W, D] (Hq a multiple of Hkv, not repeated), ``attention_mask`` a
    :func:`packing_block_mask`; returns softmax(scaling · Q Kᵀ + mask) V as [k, W, Hq, D] and no
    weights. Compiled on a GPU (the module docstring); the main kernel is forced, since the short-query
    decoding kernel needs a power-of-two Hq / Hkv."""
    if not isinstance(attention_mask, BlockMask):
        raise ValueError(f"train_engine.attention=flex needs a packed train_engine.sequence_layout (its block "
                         f"mask); this forward got {type(attention_mask).__name__}")
    if dropout:
        raise ValueError(f"train_engine.attention=flex has no attention dropout; the model asks for {dropout}")
    cuda = query.device.type == "cuda"
    attend = compiled_flex_attention() if cuda else flex_attention
    output = attend(query, key, value, block_mask=attention_mask, scale=scaling,
                    enable_gqa=query.shape[1] != key.shape[1],
                    kernel_options={"FORCE_USE_FLEX_ATTENTION": True} if cuda else None)
    return output.transpose(1, 2).contiguous(), None


def use_attention(model: nn.Module, attention: str, device: torch.device, trainable: bool) -> None:
    """Set the attention implementation of ``model`` (a transformers model, or its base) on ``device``
    for ``train_engine.attention`` (:func:`rlloom_fsdp.config.check_attention` first): :data:`FLEX`
    for ``flex``; ``sdpa`` keeps the model's own."""
    check_attention(attention, device.type, trainable)
    if attention == "flex":
        AttentionInterface.register(FLEX, flex_attention_forward)
        model.config._attn_implementation = FLEX
