"""Ulysses sequence parallelism (``train_engine.sequence_parallel_size``; DeepSpeed-Ulysses, as verl
offers it): the ranks of a group share one micro-batch by its tokens.

Ranks. The engine's world of W ranks is cut into groups of SP consecutive ranks (``{0, 1}``,
``{2, 3}``, … for SP = 2), the data-parallel (DP) replicas, DP = W / SP; each rank's DP group holds
the ranks with its position in the other groups. FSDP still shards the parameters over all W ranks.
The controller hands every rank its own rows (the dispatch is unchanged); the ranks of a group
gather theirs (:func:`rlloom_enginekit.dispatch.group_rows`) and all run the same micro-batches of
that union, and each returns its own rows' results.

Tokens. A micro-batch's packed model input ``[k, W]`` (:mod:`rlloom_enginekit.packing`) is padded to
a width divisible by SP and each rank keeps the slots ``[r·W/SP, (r+1)·W/SP)`` of every pack
(:func:`rlloom_fsdp.scoring.split_sequence`): embeddings, norms, MLPs and rotary embeddings are per
token, so each rank runs them on its slots only. Attention needs every key: the attention
implementation the model runs is replaced by ``rlloom_ulysses<n>:<kernel>``
(:func:`use_sequence_parallel`), which takes q, k, v ``[k, H, W/SP, D]`` (all heads, this rank's
slots) through an all-to-all to ``[k, H/SP, W, D]`` (its share of the heads, every slot), runs the
model's kernel (sdpa, eager, flex or varlen) with the whole packing's mask (varlen: its runs), and
sends the output back the other way. Each rank's share of the heads lines up with its share of the
key/value heads, since SP divides both.

Outputs and loss. The LM head (:func:`rlloom_fsdp.head.chunked_log_probs`) or value head runs on
the response tokens whose predicting state lies in the rank's slots; their log-probs, entropy or
values are then gathered over the group (:meth:`TokenShard.gather`, a few floats per token), so
every rank of a group holds the micro-batch's whole ``[b, R]`` outputs and computes the same loss
from them: losses over whole sequences (GSPO's sequence ratio, ``seq-mean-token-mean``) need every
token of a row. The gather's backward hands each rank the gradient of its own tokens only, which
counts the loss once per group: with FSDP's gradient average over the W ranks and the engine's
backward of ``loss · W`` the summed gradient is Σ over groups of d loss / dθ, the gradient of SP = 1.
Both all-to-alls are linear, and each one's backward is the other.
"""

from __future__ import annotations

import dataclasses
import inspect
import itertools
from collections.abc import Callable

import torch
import torch.distributed as dist
from torch import nn
from transformers import AttentionInterface
from transformers.modeling_utils import ALL_ATTENTION_FUNCTIONS

from rlloom_fsdp.attention import KERNELS, ULYSSES, kernel_of

_names = itertools.count()  # each engine's implementation gets a name of its own (its group)


@dataclasses.dataclass(frozen=True)
class SequenceGroups:
    """This rank's place: ``size`` ranks per sequence-parallel group (``group``, None when 1), its
    ``rank`` in it, and the ``dp_group`` (None: the whole world) of ``dp_size`` replicas."""

    size: int
    rank: int
    group: dist.ProcessGroup | None
    dp_group: dist.ProcessGroup | None
    dp_size: int

    def destroy(self) -> None:
        """Destroy the groups :func:`sequence_groups` created (while torch.distributed is up)."""
        for group in (self.group, self.dp_group):
            if group is not None and dist.is_initialized():
                dist.destroy_process_group(group)


def sequence_groups(size: int) -> SequenceGroups:
    """The groups of ``size`` consecutive ranks of the default process group and the DP groups
    across them (module docstring); a collective: every rank creates every group, in one order.
    ``size`` must divide the world size (checked before)."""
    world, rank = dist.get_world_size(), dist.get_rank()
    if size == 1:
        return SequenceGroups(1, 0, None, None, world)
    mine: dict[str, dist.ProcessGroup] = {}
    layouts = {"sp": [list(range(start, start + size)) for start in range(0, world, size)],
               "dp": [list(range(offset, world, size)) for offset in range(size)]}
    for kind, rank_lists in layouts.items():
        for ranks in rank_lists:
            group = dist.new_group(ranks)
            if rank in ranks:
                mine[kind] = group
    return SequenceGroups(size, rank % size, mine["sp"], mine["dp"], world // size)


class _AllToAll(torch.autograd.Function):
    """``x`` cut into ``size`` equal pieces along ``scatter_dim``, piece j sent to rank j of ``group``;
    the pieces received, in rank order, joined along ``gather_dim``. Backward: the same exchange
    with the two dimensions swapped (its adjoint)."""

    @staticmethod
    def forward(ctx, x, group, scatter_dim, gather_dim):
        ctx.group, ctx.scatter_dim, ctx.gather_dim = group, scatter_dim, gather_dim
        return exchange(x, group, scatter_dim, gather_dim)

    @staticmethod
    def backward(ctx, grad):
        return exchange(grad.contiguous(), ctx.group, ctx.gather_dim, ctx.scatter_dim), None, None, None


def exchange(x: torch.Tensor, group: dist.ProcessGroup, scatter_dim: int, gather_dim: int) -> torch.Tensor:
    """The forward of :class:`_AllToAll` (no autograd): one ``all_to_all_single``."""
    pieces = torch.stack(x.chunk(dist.get_world_size(group), dim=scatter_dim))
    received = torch.empty_like(pieces)
    dist.all_to_all_single(received, pieces, group=group)
    return torch.cat(received.unbind(0), dim=gather_dim)


def all_to_all(x: torch.Tensor, group: dist.ProcessGroup, scatter_dim: int, gather_dim: int) -> torch.Tensor:
    """:class:`_AllToAll` (differentiable)."""
    return _AllToAll.apply(x, group, scatter_dim, gather_dim)


def attention_kernel(kernel: str, module: nn.Module) -> Callable:
    """transformers' attention function for ``kernel``: one of :data:`rlloom_fsdp.attention.KERNELS`
    (flex, varlen), a registered one (``sdpa``), or ``eager``: the ``eager_attention_forward`` of
    ``module``'s modeling file."""
    if kernel in KERNELS:
        return KERNELS[kernel]
    if kernel != "eager":
        return ALL_ATTENTION_FUNCTIONS[kernel]
    eager = getattr(inspect.getmodule(type(module)), "eager_attention_forward", None)
    if eager is None:
        raise ValueError(f"train_engine.sequence_parallel_size: {type(module).__name__}'s modeling file has no "
                         "eager_attention_forward; set train_engine.attention or the model's attention to sdpa")
    return eager


def ulysses_attention(group: dist.ProcessGroup, kernel: str) -> Callable:
    """An attention function (transformers' contract) for one sequence-parallel ``group``: q [k, Hq, w, D],
    k and v [k, Hkv, w, D] of this rank's w slots through :func:`all_to_all` to [k, H/SP, SP·w, D],
    ``kernel`` on them with the whole packing's ``attention_mask`` (or, for varlen, the ``sequence_runs``
    among ``kwargs``), and its output [k, SP·w, Hq/SP, D]
    back to [k, w, Hq, D]; no weights."""

    def forward(module, query, key, value, attention_mask, **kwargs):
        query, key, value = (all_to_all(states, group, scatter_dim=1, gather_dim=2) for states in (query, key, value))
        output, _ = attention_kernel(kernel, module)(module, query, key, value, attention_mask, **kwargs)
        return all_to_all(output, group, scatter_dim=1, gather_dim=2), None

    return forward


def use_sequence_parallel(model: nn.Module, groups: SequenceGroups) -> None:
    """Make ``model`` (a transformers model, its attention already chosen:
    :func:`rlloom_fsdp.attention.use_attention`) attend through :func:`ulysses_attention` over
    ``groups.group``, under a :data:`rlloom_fsdp.attention.ULYSSES` name of its own; nothing at SP = 1."""
    if groups.size == 1:
        return
    kernel = kernel_of(model.config._attn_implementation)
    name = f"{ULYSSES}{next(_names)}:{kernel}"
    AttentionInterface.register(name, ulysses_attention(groups.group, kernel))
    model.config._attn_implementation = name


@dataclasses.dataclass
class TokenShard:
    """Which rank of a sequence-parallel ``group`` scores which of a micro-batch's n response tokens:
    ``sizes[r]`` of them on rank r, ``order`` [n] the tokens' indices rank by rank (each rank's in
    increasing order), this process being rank ``rank``."""

    group: dist.ProcessGroup
    rank: int
    sizes: tuple[int, ...]
    order: torch.Tensor

    def to(self, device: torch.device, non_blocking: bool = False) -> TokenShard:
        return dataclasses.replace(self, order=self.order.to(device, non_blocking=non_blocking))

    def gather(self, values: torch.Tensor) -> torch.Tensor:
        """This rank's per-token ``values`` [sizes[rank]] -> every rank's, [n] in token order
        (differentiable: the backward keeps this rank's part of the gradient, module docstring)."""
        return _GatherTokens.apply(values, self)


class _GatherTokens(torch.autograd.Function):
    @staticmethod
    def forward(ctx, values, shard):
        width = max(*shard.sizes, 1)
        parts = [values.new_empty(width) for _ in shard.sizes]
        dist.all_gather(parts, nn.functional.pad(values, (0, width - values.numel())), group=shard.group)
        ranked = torch.cat([part[:size] for part, size in zip(parts, shard.sizes)])
        start = sum(shard.sizes[: shard.rank])
        ctx.mine = shard.order[start: start + shard.sizes[shard.rank]]
        return torch.empty_like(ranked).index_copy_(0, shard.order, ranked)

    @staticmethod
    def backward(ctx, grad):
        return grad[ctx.mine], None
