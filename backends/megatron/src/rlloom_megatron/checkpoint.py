"""A Megatron engine's weights and AdamW state as a ``torch.distributed.checkpoint`` (DCP) folder whose
layout does not depend on the tensor-parallel (TP) size it was written at.

Each Megatron parameter is stored as one global tensor, key ``model.<name>``, and each of its AdamW
moments as ``optimizer.<name>.exp_avg`` / ``.exp_avg_sq`` of the same layout (``optimizer.<name>.step``:
its step count). A TP rank contributes its slice as a box (offsets and sizes) of that tensor
(:func:`boxes`):

- split along dimension 0 (``linear_qkv`` by whole query groups, whose fused layout is the same at
  any TP size) or dimension 1 (``linear_proj``, ``linear_fc2``): rank r's box starts at r × its size;
- ``linear_fc1`` [gate; up] is stored as [2, f, h] (gate, then up): rank r holds the r-th slice of
  each, so its [2·f/tp, h] slice is the box [2, f/tp, h] at (0, r·f/tp, 0);
- the vocabulary rows (embedding, output layer) unpadded, [vocab, h]: rank r holds rows
  [r·V/tp, (r+1)·V/tp) of the padded vocabulary V (:class:`~rlloom_megatron.convert.ModelLayout`),
  and its box is the part of them below ``vocab`` (padding is never written);
- replicated parameters (norms, a critic's value head) whole.

Data-parallel replicas offer the same boxes and DCP writes one copy. The AdamW moments of megatron-core's
distributed optimizer are held in contiguous ranges of each parameter's flattened slice, one range
per DP rank (:class:`rlloom_megatron.optimizer.AdamHolding`); a range is written as the few boxes that
cover it exactly (:func:`flat_boxes`: a partial first row, whole rows, a partial last row, and so on
down the dimensions), each placed inside the rank's TP box. So every rank writes, and on load
reads, only what it holds; nothing is gathered on one rank.

Loading gives every rank the boxes of its own TP and DP layout; DCP reads each from the saved boxes
that overlap it, so a checkpoint resumes at any TP and DP size, with or without the distributed
optimizer, and in one process (``rlloom export``).

The boxes are torch ``ShardedTensor`` s, whose metadata lists every rank's boxes (gathered once per
save or load): DTensor, which torch recommends instead, splits a dimension in ``torch.chunk`` pieces
and cannot describe the vocabulary boxes (the padding, and so each rank's share, depends on the TP
size) nor the optimizer's ranges. torch's deprecation warning for ``ShardedTensor`` is silenced
around the DCP calls here only.
"""

from __future__ import annotations

import contextlib
import math
import warnings
from collections.abc import Iterator
from dataclasses import dataclass

import torch
import torch.distributed as dist
import torch.distributed.checkpoint as dcp
from torch.distributed._shard.metadata import ShardMetadata
from torch.distributed._shard.sharded_tensor import Shard, ShardedTensor
from torch.distributed._shard.sharded_tensor.metadata import ShardedTensorMetadata, TensorProperties

from rlloom_megatron.convert import GATE_UP, VOCAB_ROWS, ModelLayout, is_tensor_parallel, local_spec_name, split_dim
from rlloom_megatron.optimizer import AdamHolding

MOMENTS = ("exp_avg", "exp_avg_sq")
Box = tuple[tuple[int, ...], tuple[int, ...]]  # (offsets, sizes) in the stored global tensor


def boxes(name: str, local_shape: torch.Size, layout: ModelLayout, tp_size: int) -> tuple[tuple[int, ...], list[Box]]:
    """``(global_shape, [box of TP rank 0, 1, …])`` of Megatron parameter ``name`` (local spec name)
    whose slice on every rank has shape ``local_shape``; a rank whose slice is all vocabulary padding
    has an empty box (sizes 0 in the first dimension)."""
    shape = tuple(local_shape)
    if not is_tensor_parallel(name):
        return shape, [((0,) * len(shape), shape)] * tp_size
    if name.endswith(GATE_UP):
        part = shape[0] // 2
        return (2, part * tp_size, shape[1]), [((0, r * part, 0), (2, part, shape[1])) for r in range(tp_size)]
    dim = split_dim(name)
    global_shape = list(shape)
    global_shape[dim] *= tp_size
    if name.endswith(VOCAB_ROWS):
        global_shape[0] = layout.vocab
    result = []
    for rank in range(tp_size):
        offsets, sizes = [0] * len(shape), list(shape)
        offsets[dim] = rank * shape[dim]
        sizes[dim] = max(0, min(shape[dim], global_shape[dim] - offsets[dim]))
        result.append((tuple(offsets), tuple(sizes)))
    return tuple(global_shape), result


def stored_shape(name: str, local_shape: torch.Size) -> tuple[int, ...]:
    """The shape of a rank's slice of parameter ``name`` as its box holds it: ``linear_fc1``'s
    [2·f/tp, h] as [2, f/tp, h] (gate, up); any other slice as it is."""
    if is_tensor_parallel(name) and name.endswith(GATE_UP):
        return (2, local_shape[0] // 2, local_shape[1])
    return tuple(local_shape)


def flat_boxes(shape: tuple[int, ...], start: int, stop: int) -> list[Box]:
    """Boxes that together cover exactly the elements ``[start, stop)`` of a row-major tensor of
    ``shape``, in memory order; in each, the dimensions after its first non-unit one are whole, so
    each box is itself a contiguous range of elements."""
    if start >= stop:
        return []
    if len(shape) == 1:
        return [((start,), (stop - start,))]
    inner = math.prod(shape[1:])

    def within_row(row: int, first: int, last: int) -> list[Box]:
        return [((row, *offsets), (1, *sizes)) for offsets, sizes in flat_boxes(shape[1:], first, last)]

    whole_from, whole_to = -(-start // inner), stop // inner  # the rows [start, stop) covers entirely
    if whole_from > whole_to:  # inside one row
        row = start // inner
        return within_row(row, start - row * inner, stop - row * inner)
    result = within_row(whole_from - 1, start % inner, inner) if start % inner else []
    if whole_to > whole_from:
        result.append(((whole_from, *(0,) * (len(shape) - 1)), (whole_to - whole_from, *shape[1:])))
    if stop % inner:
        result += within_row(whole_to, 0, stop % inner)
    return result


@dataclass(frozen=True)
class Piece:
    """A box of a stored global tensor and the tensor (a view of this rank's data) that fills it."""

    offsets: tuple[int, ...]
    sizes: tuple[int, ...]
    tensor: torch.Tensor


class ShardLayout:
    """How TP rank ``tp_rank`` of ``tp_size`` maps its tensors to boxes of the stored global tensors."""

    def __init__(self, layout: ModelLayout, tp_size: int, tp_rank: int) -> None:
        self.layout = layout
        self.tp_size = tp_size
        self.tp_rank = tp_rank

    def pieces(self, name: str, local_shape: torch.Size, flat: torch.Tensor, start: int) -> list[Piece]:
        """The boxes of parameter ``name``'s stored global tensor that ``flat`` fills: ``flat`` is
        elements ``[start, start + len(flat))`` of this rank's slice (shape ``local_shape``),
        flattened — of the parameter or of its AdamW moments. Each box comes with its view of
        ``flat``; vocabulary padding rows are left out."""
        _, all_boxes = boxes(name, local_shape, self.layout, self.tp_size)
        rank_offsets, rank_sizes = all_boxes[self.tp_rank]
        shape = stored_shape(name, local_shape)
        result = []
        for offsets, sizes in flat_boxes(shape, start, start + flat.numel()):
            rows = min(sizes[0], rank_sizes[0] - offsets[0])  # rows past the rank's box: vocabulary padding
            if rows <= 0:
                continue
            sizes = (rows, *sizes[1:])
            first = sum(offset * math.prod(shape[dim + 1:]) for dim, offset in enumerate(offsets)) - start
            view = flat[first: first + math.prod(sizes)].view(sizes)
            result.append(Piece(tuple(o + r for o, r in zip(offsets, rank_offsets)), sizes, view))
        return result

    def global_shape(self, name: str, local_shape: torch.Size) -> tuple[int, ...]:
        return boxes(name, local_shape, self.layout, self.tp_size)[0]


def _sharded_tensors(local: dict[str, tuple[tuple[int, ...], list[Piece], TensorProperties]]
                     ) -> dict[str, ShardedTensor]:
    """One ShardedTensor per key of ``local`` (``key: (global shape, this rank's pieces, tensor
    properties)``) with this rank's pieces as its local shards. Its metadata lists every rank's boxes
    (one ``all_gather_object`` over the default group: every rank calls this); a box several ranks
    hold (data-parallel replicas) is listed once, as this rank's when it holds it."""
    me, world = dist.get_rank(), dist.get_world_size()
    device = next((p.tensor.device for _, pieces, _ in local.values() for p in pieces), torch.device("cpu"))
    mine = {key: [(p.offsets, p.sizes) for p in pieces] for key, (_, pieces, _) in local.items()}
    everyone: list[dict | None] = [None] * world
    dist.all_gather_object(everyone, mine)
    result = {}
    for key, (global_shape, pieces, properties) in local.items():
        holder: dict[tuple, int] = {}
        for rank in [me] + [r for r in range(world) if r != me]:
            for box in everyone[rank].get(key, []):
                holder.setdefault(box, rank)
        listed = [ShardMetadata(list(offsets), list(sizes), f"rank:{rank}/{device}")
                  for (offsets, sizes), rank in holder.items()]
        shards = [Shard(p.tensor, ShardMetadata(list(p.offsets), list(p.sizes), f"rank:{me}/{device}"))
                  for p in pieces]
        metadata = ShardedTensorMetadata(listed, torch.Size(global_shape), properties)
        result[key] = ShardedTensor._init_from_local_shards_and_global_metadata(shards, metadata)
    return result


@contextlib.contextmanager
def _sharded_tensor_warnings_silenced() -> Iterator[None]:
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message=".*deprecating ShardedTensor", category=FutureWarning)
        yield


def _parameters(model: torch.nn.Module) -> list[tuple[str, torch.nn.Parameter]]:
    """``model``'s parameters under their local spec names, the names the checkpoint keys use."""
    return [(local_spec_name(name), param) for name, param in model.named_parameters()]


def _entry(shards: ShardLayout, name: str, param: torch.Tensor, flat: torch.Tensor, start: int):
    """``(global shape, pieces, properties)`` of ``flat`` (elements from ``start`` of ``param``'s
    slice, or of its moments) for :func:`_sharded_tensors`."""
    return (shards.global_shape(name, param.shape), shards.pieces(name, param.shape, flat, start),
            TensorProperties.create_from_tensor(flat))


def _group_of(holding: AdamHolding) -> dict:
    return next(group for group in holding.optimizer.param_groups if any(p is holding.key for p in group["params"]))


def adam_step(holding: AdamHolding, state: dict) -> torch.Tensor:
    """The step count of ``holding``'s AdamW ``state``: torch's Adam and AdamW keep it per parameter
    (``state["step"]``); TransformerEngine's and apex's ``FusedAdam`` (megatron-core's Adam when
    either is installed) per parameter group (``group["step"]``)."""
    if "step" in state:
        return state["step"]
    return torch.tensor(float(_group_of(holding)["step"]))


def install_adam_state(holding: AdamHolding, step: torch.Tensor, moments: dict[str, torch.Tensor]) -> None:
    """Make ``moments`` (``exp_avg``, ``exp_avg_sq``) and ``step`` the AdamW state of ``holding``, where
    its optimizer keeps them (see :func:`adam_step`)."""
    if isinstance(holding.optimizer, torch.optim.Adam):
        holding.optimizer.state[holding.key] = {"step": step, **moments}
    else:
        holding.optimizer.state[holding.key] = dict(moments)
        _group_of(holding)["step"] = int(step)


def engine_state(model: torch.nn.Module, holdings: dict[torch.nn.Parameter, AdamHolding],
                 shards: ShardLayout) -> dict:
    """The DCP state of this rank: its parameters' boxes and the boxes of the AdamW state it
    holds (``holdings``: :func:`rlloom_megatron.optimizer.adam_holdings`; empty for a frozen model).
    Every rank of the default group calls it together."""
    local, steps = {}, {}
    for name, param in _parameters(model):
        local[f"model.{name}"] = _entry(shards, name, param, param.detach().view(-1), 0)
        holding = holdings.get(param)
        state = holding.optimizer.state.get(holding.key) if holding else None
        if state:
            steps[f"optimizer.{name}.step"] = adam_step(holding, state)
            for moment in MOMENTS:
                local[f"optimizer.{name}.{moment}"] = _entry(shards, name, param, state[moment].view(-1), holding.start)
    return _sharded_tensors(local) | steps


def save(path: str, model: torch.nn.Module, holdings: dict[torch.nn.Parameter, AdamHolding],
         shards: ShardLayout) -> None:
    """Write :func:`engine_state` to the DCP folder ``path``; every rank of the default group takes part."""
    with _sharded_tensor_warnings_silenced():
        dcp.save(engine_state(model, holdings, shards), checkpoint_id=path)


def load(path: str, model: torch.nn.Module, holdings: dict[torch.nn.Parameter, AdamHolding],
         shards: ShardLayout) -> None:
    """Read the folder :func:`save` wrote (at any TP and DP size) into ``model``'s parameters and,
    where ``holdings`` says this rank keeps AdamW state, that state (installed in the optimizer);
    vocabulary padding rows are set to 0. Every rank of the default group takes part."""
    saved = dcp.FileSystemReader(path).read_metadata().state_dict_metadata
    parameters = _parameters(model)
    targets: dict[str, torch.Tensor] = {}  # the fresh tensors DCP fills, by key
    local, steps = {}, {}
    for name, param in parameters:
        targets[f"model.{name}"] = torch.zeros_like(param)
        local[f"model.{name}"] = _entry(shards, name, param, targets[f"model.{name}"].view(-1), 0)
        holding = holdings.get(param)
        if holding and f"optimizer.{name}.exp_avg" in saved:
            steps[f"optimizer.{name}.step"] = torch.zeros((), dtype=torch.float32)
            for moment in MOMENTS:
                key = f"optimizer.{name}.{moment}"
                targets[key] = torch.zeros_like(holding.key)
                local[key] = _entry(shards, name, param, targets[key].view(-1), holding.start)
    missing = [key for key in [*local, *steps] if key not in saved]
    if missing:
        raise KeyError(f"{path!r} has no {missing[0]!r}: it was not written by a megatron engine for this model")
    with _sharded_tensor_warnings_silenced():
        dcp.load(_sharded_tensors(local) | steps, checkpoint_id=path)
    with torch.no_grad():
        for name, param in parameters:
            param.copy_(targets[f"model.{name}"])
            if f"optimizer.{name}.step" in steps:
                install_adam_state(holdings[param], steps[f"optimizer.{name}.step"],
                                   {moment: targets[f"optimizer.{name}.{moment}"] for moment in MOMENTS})
