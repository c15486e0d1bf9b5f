"""Attention of the packed layouts (``train_engine.attention``): the dense masked SDPA the model
brings (``sdpa``), torch's FlexAttention over a block mask of the packing (``flex``), or causal SDPA
over each sequence of the packing on its own (``varlen``).

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

``varlen`` sets the model's attention implementation to :data:`VARLEN`
(:func:`varlen_attention_forward`): no mask exists; for each run of the packing
(:func:`sequence_runs`: a prompt with the response that follows it, or a later response after a copy
of its prompt) ``scaled_dot_product_attention(..., is_causal=True)`` runs on the run's slots alone,
so memory stays O(W) per pack (PyTorch's flash kernels, on the CPU too), masked-out pairs are not
computed, K and V keep their own heads, and it trains on the CPU and on a GPU. Each response after
the first of a shared prompt recomputes that prompt's queries (discarded), and a pack costs one
kernel call per run and layer.
"""

from __future__ import annotations

import functools
import itertools

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
all-to-all around the kernel ``<kernel>`` (``sdpa``, ``eager``, :data:`FLEX` or :data:`VARLEN`)."""

VARLEN = "rlloom_varlen"
"""The attention implementation name :func:`varlen_attention_forward` is registered under."""

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


Run = tuple[int, int, int, int]
"""``(context_start, context_end, start, end)``: a causal sequence of a pack, the slots
``[context_start, context_end)`` (a prompt; empty when none) followed by ``[start, end)``, whose
outputs it gives (:func:`sequence_runs`)."""


def pack_runs(segments: list[int], owners: list[int]) -> tuple[Run, ...]:
    """The runs of one pack's ``segments`` and ``owners`` (:class:`rlloom_enginekit.packing.Packing`),
    in slot order, their ``[start, end)`` tiling the pack's tokens (not its right padding): a prompt
    and the response right after it that continues it form one run (context empty; in ``packed``
    every row is one), every other response has its prompt's slots as context."""
    runs: list[Run] = []
    prompts: dict[int, tuple[int, int]] = {}
    start = 0
    for (segment, owner), slots in itertools.groupby(zip(segments, owners)):
        end = start + len(list(slots))
        if segment < 0:
            break
        if segment == owner:
            prompts[segment] = (start, end)
            runs.append((start, start, start, end))
        else:
            prompt_start, prompt_end = prompts[owner]
            if prompt_end == start and runs[-1] == (prompt_start, prompt_start, prompt_start, start):
                runs[-1] = (prompt_start, prompt_start, prompt_start, end)  # right after its prompt: one run
            else:
                runs.append((prompt_start, prompt_end, start, end))
        start = end
    return tuple(runs)


def sequence_runs(segments: torch.Tensor, owners: torch.Tensor) -> tuple[tuple[Run, ...], ...]:
    """:func:`pack_runs` of every pack of ``segments`` and ``owners`` [k, W] (on the CPU). Attending
    causally within each run is :func:`rlloom_enginekit.packing.may_attend` on the real tokens: a
    response sees its prompt (the context) and its own earlier tokens."""
    return tuple(pack_runs(pack_segments, pack_owners)
                 for pack_segments, pack_owners in zip(segments.tolist(), owners.tolist()))


def run_attention(query: torch.Tensor, key: torch.Tensor, value: torch.Tensor, run: Run,
                  scaling: float | None) -> torch.Tensor:
    """Causal SDPA over one ``run`` of a pack's ``query`` [1, Hq, W, D], ``key`` and ``value``
    [1, Hkv, W, D]: the outputs [1, Hq, end − start, D] of its own slots (the context's queries
    are computed with it and dropped)."""
    context_start, context_end, start, end = run

    def take(states: torch.Tensor) -> torch.Tensor:
        own = states[:, :, start:end]
        if context_start == context_end:
            return own
        return torch.cat([states[:, :, context_start:context_end], own], dim=2)

    output = nn.functional.scaled_dot_product_attention(take(query), take(key), take(value), is_causal=True,
                                                        scale=scaling, enable_gqa=query.shape[1] != key.shape[1])
    return output[:, :, context_end - context_start:]


def varlen_attention_forward(
    module: nn.Module, query: torch.Tensor, key: torch.Tensor, value: torch.Tensor, attention_mask,
    scaling: float | None = None, dropout: float = 0.0, sequence_runs: tuple | None = None, **kwargs,
) -> tuple[torch.Tensor, None]:
    """transformers' attention-function contract for :data:`VARLEN`: ``query`` [k, Hq, W, D], ``key``
    and ``value`` [k, Hkv, W, D], ``sequence_runs`` (:func:`sequence_runs`) passed through the model's
    keyword arguments, no ``attention_mask``; returns [k, W, Hq, D] — each run's
    :func:`run_attention` in its slots, 0 on the packs' padding — and no weights."""
    if sequence_runs is None:
        raise ValueError("train_engine.attention=varlen needs a packed train_engine.sequence_layout (its runs)")
    unsupported = [name for name in ("softcap", "sliding_window", "s_aux") if kwargs.get(name) is not None]
    if dropout or unsupported:
        asked = unsupported or f"dropout {dropout}"
        raise ValueError(f"train_engine.attention=varlen has no attention dropout, softcapping, sliding window or "
                         f"sinks; the model asks for {asked}: set train_engine.attention=sdpa")
    packs = []
    for pack, runs in enumerate(sequence_runs):
        states = (query[pack:pack + 1], key[pack:pack + 1], value[pack:pack + 1])
        pieces = [run_attention(*states, run, scaling) for run in runs]
        used = runs[-1][3] if runs else 0
        pieces.append(query.new_zeros(1, query.shape[1], query.shape[2] - used, query.shape[3]))
        packs.append(torch.cat(pieces, dim=2))
    return torch.cat(packs).transpose(1, 2).contiguous(), None


KERNELS = {FLEX: flex_attention_forward, VARLEN: varlen_attention_forward}
"""The attention functions of this module by implementation name (:func:`use_attention`)."""


def use_attention(model: nn.Module, attention: str, device: torch.device, trainable: bool) -> None:
    """Set the attention implementation of ``model`` (a transformers model, or its base) on ``device``
    for ``train_engine.attention`` (:func:`rlloom_fsdp.config.check_attention` first): :data:`FLEX`
    for ``flex``, :data:`VARLEN` for ``varlen``; ``sdpa`` keeps the model's own."""
    check_attention(attention, device.type, trainable)
    name = {"flex": FLEX, "varlen": VARLEN}.get(attention)
    if name is not None:
        AttentionInterface.register(name, KERNELS[name])
        model.config._attn_implementation = name
