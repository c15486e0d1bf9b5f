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
- replicated parameters (norms, a critic's value head) whole: every rank offers the same tensor and
  DCP writes one copy, as it does for the boxes of data-parallel replicas.

Loading gives every rank the boxes of its own TP size; DCP reads each from the saved boxes that
overlap it, so a checkpoint resumes at any TP and DP size, and in one process (``rlloom export``).
With a sharded optimizer (ZeRO-1) each DP replica writes and reads only the moments it holds.

The boxes are torch ``ShardedTensor`` s (each lists every TP rank's box): DTensor, which torch
recommends instead, splits a dimension in ``torch.chunk`` pieces and cannot describe the vocabulary
boxes (the padding, and so each rank's share, depends on the TP size). torch's deprecation warning
for ``ShardedTensor`` is silenced around the DCP calls here only.
"""

from __future__ import annotations

import contextlib
import warnings
from collections.abc import Iterator

import torch
import torch.distributed as dist
import torch.distributed.checkpoint as dcp
from torch.distributed._shard.metadata import ShardMetadata
from torch.distributed._shard.sharded_tensor import Shard, ShardedTensor
from torch.distributed._shard.sharded_tensor.metadata import ShardedTensorMetadata, TensorProperties

from rlloom_megatron.convert import GATE_UP, ROW_PARALLEL, VOCAB_ROWS, ModelLayout, is_tensor_parallel, local_spec_name

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
    dim = 1 if name.endswith(ROW_PARALLEL) else 0
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


def _stored_view(name: str, tensor: torch.Tensor, sizes: tuple[int, ...]) -> torch.Tensor:
    """The part of this rank's slice ``tensor`` that its box ``sizes`` covers, as a view."""
    if name.endswith(GATE_UP):
        return tensor.view(sizes)
    return tensor[: sizes[0]] if name.endswith(VOCAB_ROWS) else tensor


class ShardLayout:
    """How this rank's tensors map to stored boxes: the layout, the TP group and this rank in it."""

    def __init__(self, layout: ModelLayout, tp_group: dist.ProcessGroup) -> None:
        self.layout = layout
        self.tp_size = dist.get_world_size(tp_group)
        self.tp_rank = dist.get_rank(tp_group)
        self.global_ranks = [dist.get_global_rank(tp_group, rank) for rank in range(self.tp_size)]

    def stored(self, name: str, tensor: torch.Tensor) -> torch.Tensor:
        """``tensor`` (this rank's slice of parameter ``name``, its local spec name, or of one of its
        moments) as the DCP value to write or read into: a ShardedTensor with this rank's box as its
        local shard, or the tensor itself for a replicated parameter. Reading into it fills ``tensor``
        (shared storage), vocabulary padding excepted."""
        if not is_tensor_parallel(name):
            return tensor
        global_shape, all_boxes = boxes(name, tensor.shape, self.layout, self.tp_size)
        shards = {rank: ShardMetadata(list(offsets), list(sizes), f"rank:{self.global_ranks[rank]}/{tensor.device}")
                  for rank, (offsets, sizes) in enumerate(all_boxes) if sizes[0] > 0}
        metadata = ShardedTensorMetadata(list(shards.values()), torch.Size(global_shape),
                                         TensorProperties.create_from_tensor(tensor))
        local = []
        if self.tp_rank in shards:
            local = [Shard(_stored_view(name, tensor, all_boxes[self.tp_rank][1]), shards[self.tp_rank])]
        return ShardedTensor._init_from_local_shards_and_global_metadata(local, metadata)


@contextlib.contextmanager
def _sharded_tensor_warnings_silenced() -> Iterator[None]:
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message=".*deprecating ShardedTensor", category=FutureWarning)
        yield


def _parameters(model: torch.nn.Module) -> list[tuple[str, torch.nn.Parameter]]:
    """``model``'s parameters under their local spec names, the names the checkpoint keys use."""
    return [(local_spec_name(name), param) for name, param in model.named_parameters()]


def engine_state(model: torch.nn.Module, optimizer: torch.optim.Optimizer | None, shards: ShardLayout) -> dict:
    """The DCP state of this rank: its parameters, and the AdamW state ``optimizer`` (the local
    optimizer of a sharded one) holds, each as :meth:`ShardLayout.stored` gives it."""
    held = optimizer.state if optimizer is not None else {}
    state = {}
    for name, param in _parameters(model):
        state[f"model.{name}"] = shards.stored(name, param.detach())
        if param in held:
            state[f"optimizer.{name}.step"] = held[param]["step"]
            state.update({f"optimizer.{name}.{moment}": shards.stored(name, held[param][moment]) for moment in MOMENTS})
    return state


def save(path: str, model: torch.nn.Module, optimizer: torch.optim.Optimizer | None, shards: ShardLayout) -> None:
    """Write :func:`engine_state` to the DCP folder ``path``; every rank of the default group takes part."""
    with _sharded_tensor_warnings_silenced():
        dcp.save(engine_state(model, optimizer, shards), checkpoint_id=path)


def load(path: str, model: torch.nn.Module, optimizer: torch.optim.Optimizer | None, shards: ShardLayout) -> None:
    """Read the folder :func:`save` wrote (at any TP and DP size) into ``model``'s parameters and, for
    the parameters ``optimizer`` updates (a sharded optimizer's local one: this replica's share),
    their AdamW state; vocabulary padding rows are set to 0. Every rank of the default group takes part."""
    saved = dcp.FileSystemReader(path).read_metadata().state_dict_metadata
    owned = {param for group in (optimizer.param_groups if optimizer is not None else []) for param in group["params"]}
    parameters = _parameters(model)
    targets: dict[str, torch.Tensor] = {}  # the fresh tensors DCP fills, by key
    state: dict[str, object] = {}
    for name, param in parameters:
        wanted = [f"model.{name}"]
        if param in owned and f"optimizer.{name}.exp_avg" in saved:
            wanted += [f"optimizer.{name}.{moment}" for moment in MOMENTS]
            state[f"optimizer.{name}.step"] = torch.zeros((), dtype=torch.float32)
        for item in wanted:
            targets[item] = torch.zeros_like(param)
            state[item] = shards.stored(name, targets[item])
    missing = [key for key in state if key not in saved]
    if missing:
        raise KeyError(f"{path!r} has no {missing[0]!r}: it was not written by a megatron engine for this model")
    with _sharded_tensor_warnings_silenced():
        dcp.load(state, checkpoint_id=path)
    with torch.no_grad():
        for name, param in parameters:
            param.copy_(targets[f"model.{name}"])
            if f"optimizer.{name}.exp_avg" in targets:
                optimizer.state[param] = {"step": state[f"optimizer.{name}.step"]} | {
                    moment: targets[f"optimizer.{name}.{moment}"] for moment in MOMENTS}
