"""``Batch``: the one container that travels between the controller and the workers. A batch of B samples
holds **tensors** in a :class:`tensordict.TensorDict` of batch dimension B, **objects** (per-sample Python
values: prompt text, ground truth, uid, …) as numpy object arrays of length B, and **meta**, batch-level
values that operations carry along. A field name is a tensor's or an object's, never both. Every operation
returns a new ``Batch``; tensors are copied only where the operation must (``concat``, ``repeat``, ``reorder``).

Field conventions (B rows, prompt length P, response length R):

=====================  =========  ======  ==========================================================
field                  shape      dtype   meaning
=====================  =========  ======  ==========================================================
``prompts``            [B, P]     int64   prompt token ids, **left**-padded
``prompt_mask``        [B, P]     int64   1 on real prompt tokens, 0 on padding
``responses``          [B, R]     int64   response token ids, **right**-padded
``response_mask``      [B, R]     int64   1 on sampled tokens (EOS included): the tokens losses count
``response_attention_mask`` [B, R] int64 optional: 1 on every real response token, sampled or not (an
                                          agent's tool and user tokens), a prefix of the row; absent:
                                          ``response_mask`` (single-turn responses have no gaps)
``rollout_log_probs``  [B, R]     float32 log-prob of each sampled token under the rollout engine
``old_log_probs``      [B, R]     float32 behaviour-policy log-probs from the train engine
``ref_log_probs``      [B, R]     float32 reference-policy log-probs
``values``             [B, R]     float32 critic values
``token_level_scores`` [B, R]     float32 rewards placed on tokens (score on the last token)
``token_level_rewards`` [B, R]    float32 scores after any KL penalty
``advantages``         [B, R]     float32 per-token advantages (0 where the mask is 0)
``returns``            [B, R]     float32 value targets
``rollout_is_weights`` [B, R]    float32 rollout correction's per-token loss weights (0 where the mask is 0)
``prompt_index``       [B]        int64   optional rollout input: keys each row's randomness
``weight_version``     [B]        int64   the policy that sampled the row: the actor after step k (0: start);
                                          partial rollouts: the oldest, ``weight_version_max`` [B] the newest
=====================  =========  ======  ==========================================================

Object fields: ``prompt_text``, ``response_text``, ``ground_truth``, ``data_source``, ``uid`` (the
same for all samples drawn from one prompt)."""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Any

import numpy as np
import torch
import torch.nn.functional as F
from tensordict import TensorDict

LEFT_PADDED = ("prompts", "prompt_mask")
"""[B, P] fields padded on the left (the conventions above); other [B, L] fields pad on the right."""

PROMPT_INDEX_FIELD = "prompt_index"
"""Optional rollout input [B]: each row's prompt index, keying its randomness in place of
``sampling.first_prompt + row`` (:meth:`rlloom.protocols.RolloutEngine.generate`)."""

SEED_FIELD = "sampling_seed"
"""Optional rollout input [B] (>= 0): each row's seed in place of ``sampling.seed``
(:meth:`rlloom.protocols.BatchesRequests.generate_requests`)."""


class BatchError(ValueError):
    """A batch operation got inputs that do not fit together (sizes, fields)."""


def _as_object_array(name: str, values: Any) -> np.ndarray:
    """``values`` (one per sample) as a 1-D numpy object array (kept as is when it is one); a string is
    refused rather than split into characters."""
    if isinstance(values, np.ndarray) and values.dtype == object and values.ndim == 1:
        return values
    is_sequence = isinstance(values, Sequence) or (isinstance(values, np.ndarray) and values.ndim > 0)
    if not is_sequence or isinstance(values, (str, bytes)):
        raise BatchError(f"object field {name!r} needs a sequence with one value per sample, "
                         f"got {type(values).__name__}")
    array = np.empty(len(values), dtype=object)
    for i, value in enumerate(values):
        array[i] = value
    return array


class Batch:
    """Tensors with a batch dimension, per-sample objects and batch-level meta. See module doc."""

    __slots__ = ("_tensors", "_objects", "meta")

    def __init__(self, tensors: Mapping[str, torch.Tensor] | TensorDict | None = None,
                 objects: Mapping[str, Sequence[Any]] | None = None, meta: Mapping[str, Any] | None = None, *,
                 batch_size: int | None = None) -> None:
        tensors = dict(tensors.items()) if tensors is not None else {}
        objects = {name: _as_object_array(name, values) for name, values in (objects or {}).items()}
        both = sorted(set(tensors) & set(objects))
        if both:
            raise BatchError(f"field(s) {both} given both as tensors and as objects")
        sizes = {name: int(t.shape[0]) if t.dim() > 0 else None for name, t in tensors.items()}
        sizes.update({name: len(values) for name, values in objects.items()})
        for name, size in sizes.items():
            if size is None:
                raise BatchError(f"tensor field {name!r} is a scalar; batch fields need a batch dimension")
        if batch_size is None:
            if not sizes:
                raise BatchError("an empty Batch needs an explicit batch_size")
            batch_size = next(iter(sizes.values()))
        mismatched = {name: size for name, size in sizes.items() if size != batch_size}
        if mismatched:
            raise BatchError(f"batch size is {batch_size} but field(s) have other sizes: {mismatched}")
        self._tensors = TensorDict(tensors, batch_size=[batch_size])
        self._objects = objects
        self.meta: dict[str, Any] = dict(meta or {})

    # ----------------------------------------------------------------------------- access
    def __len__(self) -> int:
        return int(self._tensors.batch_size[0])

    @property
    def batch_size(self) -> int:
        return len(self)

    @property
    def tensors(self) -> TensorDict:
        return self._tensors

    @property
    def objects(self) -> dict[str, np.ndarray]:
        return self._objects

    def keys(self) -> list[str]:
        return list(self._tensors.keys()) + list(self._objects.keys())

    def __contains__(self, name: object) -> bool:
        return isinstance(name, str) and (name in self._objects or name in self._tensors.keys())

    def __getitem__(self, name: str) -> Any:
        if name in self._objects:
            return self._objects[name]
        if name in self._tensors.keys():
            return self._tensors[name]
        raise KeyError(f"Batch has no field {name!r}; it has {sorted(self.keys())}")

    def __setitem__(self, name: str, value: Any) -> None:
        if isinstance(value, torch.Tensor):
            if value.dim() == 0 or value.shape[0] != len(self):
                raise BatchError(
                    f"field {name!r} has leading size {tuple(value.shape)[:1]}, batch size is {len(self)}"
                )
            self._objects.pop(name, None)
            self._tensors[name] = value
        else:
            array = _as_object_array(name, value)
            if len(array) != len(self):
                raise BatchError(f"field {name!r} has {len(array)} values, batch size is {len(self)}")
            if name in self._tensors.keys():
                del self._tensors[name]
            self._objects[name] = array

    def get(self, name: str, default: Any = None) -> Any:
        return self[name] if name in self else default

    def require(self, *names: str) -> None:
        """Raise a :class:`BatchError` naming every field in ``names`` that is missing."""
        missing = [name for name in names if name not in self]
        if missing:
            raise BatchError(f"Batch is missing field(s) {missing}; it has {sorted(self.keys())}")

    def __repr__(self) -> str:
        tensor_desc = ", ".join(f"{k}: {tuple(v.shape)} {v.dtype}" for k, v in self._tensors.items())
        object_desc = ", ".join(self._objects)
        return f"Batch(size={len(self)}, tensors=[{tensor_desc}], objects=[{object_desc}], meta={list(self.meta)})"

    # ----------------------------------------------------------------------------- building
    def select(self, *names: str) -> Batch:
        """A batch with only the named fields (tensors share storage with this one)."""
        self.require(*names)
        tensor_names = [n for n in names if n in self._tensors.keys()]
        objects = {n: self._objects[n] for n in names if n in self._objects}
        return Batch({n: self._tensors[n] for n in tensor_names}, objects, self.meta, batch_size=len(self))

    def exclude(self, *names: str) -> Batch:
        """A batch without the named fields (missing names are ignored)."""
        keep = [name for name in self.keys() if name not in names]
        return self.select(*keep)

    def union(self, other: Batch) -> Batch:
        """Fields of both batches. Sizes must match; a field present in both must be equal (a tensor
        field also in dtype). Meta of both, ``other``'s winning."""
        if len(self) != len(other):
            raise BatchError(f"cannot union batches of sizes {len(self)} and {len(other)}")
        tensors = dict(self._tensors.items())
        for name, value in other._tensors.items():
            if name in tensors and (tensors[name].dtype != value.dtype or not torch.equal(tensors[name], value)):
                raise BatchError(f"cannot union: field {name!r} differs between the batches")
            tensors[name] = value
        objects = dict(self._objects)
        for name, values in other._objects.items():
            if name in objects and not np.array_equal(objects[name], values):
                raise BatchError(f"cannot union: field {name!r} differs between the batches")
            objects[name] = values
        return Batch(tensors, objects, {**self.meta, **other.meta}, batch_size=len(self))

    def reorder(self, indices: Sequence[int] | torch.Tensor) -> Batch:
        """Rows in the order given by integer ``indices`` (a permutation, a subset, or with repeats;
        negative indices count from the end). A boolean mask is refused."""
        index = torch.as_tensor(indices)
        if index.numel() == 0:
            index = index.long()
        if index.dtype == torch.bool or index.is_floating_point() or index.is_complex():
            raise BatchError(f"reorder takes integer indices, got dtype {index.dtype}")
        index = index.long()
        if index.dim() != 1:
            raise BatchError(f"reorder takes a 1-D index, got shape {tuple(index.shape)}")
        out_of_range = index[(index < -len(self)) | (index >= len(self))]
        if len(out_of_range):
            raise BatchError(f"reorder index {out_of_range.tolist()} out of range for batch size {len(self)}")
        np_index = index.numpy()
        tensors = {name: value[index] for name, value in self._tensors.items()}
        objects = {name: values[np_index] for name, values in self._objects.items()}
        return Batch(tensors, objects, self.meta, batch_size=len(index))

    def slice(self, start: int, stop: int) -> Batch:
        """Rows ``start:stop`` (views, no copy)."""
        start, stop, _ = slice(start, stop).indices(len(self))
        tensors = {name: value[start:stop] for name, value in self._tensors.items()}
        objects = {name: values[start:stop] for name, values in self._objects.items()}
        return Batch(tensors, objects, self.meta, batch_size=max(stop - start, 0))

    def split(self, size: int) -> list[Batch]:
        """Consecutive pieces of ``size`` rows; the last one may be smaller."""
        if size < 1:
            raise BatchError(f"split size must be >= 1, got {size}")
        return [self.slice(start, start + size) for start in range(0, len(self), size)]

    def chunk(self, parts: int) -> list[Batch]:
        """``parts`` consecutive pieces whose sizes differ by at most one (larger ones first)."""
        if parts < 1:
            raise BatchError(f"chunk needs parts >= 1, got {parts}")
        if parts > len(self):
            raise BatchError(f"cannot chunk a batch of {len(self)} rows into {parts} non-empty parts")
        base, extra = divmod(len(self), parts)
        pieces, start = [], 0
        for i in range(parts):
            stop = start + base + (1 if i < extra else 0)
            pieces.append(self.slice(start, stop))
            start = stop
        return pieces

    @staticmethod
    def concat(batches: Iterable[Batch]) -> Batch:
        """Rows of all batches in order, meta of the first. Every batch must have the same tensor and object
        fields, a tensor field the same dtype and trailing shape in each (no silent type promotion)."""
        batches = list(batches)
        if not batches:
            raise BatchError("concat needs at least one batch")
        first = batches[0]
        for i, batch in enumerate(batches[1:], start=1):
            for what, have, want in (("tensor", batch._tensors.keys(), first._tensors.keys()),
                                     ("object", batch._objects.keys(), first._objects.keys())):
                if sorted(have) != sorted(want):
                    raise BatchError(f"concat: batch {i} has {what} fields {sorted(have)}, batch 0 has {sorted(want)}")
        tensors = {}
        for name in first._tensors.keys():
            parts = [b._tensors[name] for b in batches]
            trailing = {tuple(p.shape[1:]) for p in parts}
            if len(trailing) > 1:
                raise BatchError(f"concat: field {name!r} has different trailing shapes {sorted(trailing)}")
            dtypes = {p.dtype for p in parts}
            if len(dtypes) > 1:
                raise BatchError(f"concat: field {name!r} has different dtypes {sorted(map(str, dtypes))}")
            tensors[name] = torch.cat(parts)
        objects = {name: np.concatenate([b._objects[name] for b in batches]) for name in first._objects}
        return Batch(tensors, objects, first.meta, batch_size=sum(len(b) for b in batches))

    @staticmethod
    def concat_padded(batches: Iterable[Batch], pad_values: Mapping[str, float] | None = None) -> Batch:
        """:meth:`concat` of batches whose [B, L] tensors may differ in L: each padded to the longest
        (:data:`LEFT_PADDED` fields on the left, the others on the right) with ``pad_values[name]``
        (default 0: masks mark the added positions as padding)."""
        batches = list(batches)
        pad_values = pad_values or {}
        widths: dict[str, int] = {}
        for batch in batches:
            for name, value in batch._tensors.items():
                if value.dim() == 2:
                    widths[name] = max(widths.get(name, 0), value.shape[1])

        def padded(batch: Batch) -> Batch:
            tensors = {}
            for name, value in batch._tensors.items():
                if value.dim() == 2 and value.shape[1] < widths[name]:
                    extra = widths[name] - value.shape[1]
                    value = F.pad(value, (extra, 0) if name in LEFT_PADDED else (0, extra), value=pad_values.get(name, 0))
                tensors[name] = value
            return Batch(tensors, batch._objects, batch.meta, batch_size=len(batch))

        return Batch.concat([padded(batch) for batch in batches])

    def repeat(self, n: int, interleave: bool = True) -> Batch:
        """Each row ``n`` times: ``[a, a, b, b]`` when ``interleave`` else ``[a, b, a, b]``."""
        if n < 1:
            raise BatchError(f"repeat needs n >= 1, got {n}")
        rows = torch.arange(len(self))
        index = rows.repeat_interleave(n) if interleave else rows.repeat(n)
        return self.reorder(index)

    def to(self, device: str | torch.device) -> Batch:
        """The same batch with every tensor on ``device``."""
        return Batch(self._tensors.to(device).to_dict(), self._objects, self.meta, batch_size=len(self))

    # ----------------------------------------------------------------------------- pickling
    def __getstate__(self) -> dict[str, Any]:
        return {"tensors": dict(self._tensors.items()), "objects": self._objects, "meta": self.meta,
                "size": len(self)}

    def __setstate__(self, state: dict[str, Any]) -> None:
        self._tensors = TensorDict(state["tensors"], batch_size=[state["size"]])
        self._objects = state["objects"]
        self.meta = state["meta"]


RESPONSE_ATTENTION_FIELD = "response_attention_mask"


def response_attention(batch: Batch) -> torch.Tensor:
    """The response tokens a model reads ([B, R]): ``response_attention_mask`` where the batch has one
    (multi-turn trajectories), else ``response_mask``."""
    return batch[RESPONSE_ATTENTION_FIELD] if RESPONSE_ATTENTION_FIELD in batch else batch["response_mask"]


def row_tokens(batch: Batch) -> torch.Tensor:
    """Real tokens (prompt + response) of each row of ``batch``: [B]."""
    return batch["prompt_mask"].sum(dim=1) + response_attention(batch).sum(dim=1)


def masked_mean(values: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """Σ values·m / Σ m over the whole tensor (0 when the mask is empty): the token mean of a [B, R]
    field over the ``response_mask``. Padding is selected away, so an ``inf`` or ``nan`` there
    cannot leak in."""
    if values.shape != mask.shape:
        raise ValueError(f"values and mask must have the same shape, got {tuple(values.shape)} and {tuple(mask.shape)}")
    present = mask.bool()
    return torch.where(present, values, torch.zeros_like(values)).sum(dim=1).sum() / max(int(present.sum()), 1)
