"""Response log-probs and entropy of a causal LM, and a critic's values, each as one FSDP forward of
the whole model.

:func:`model_input` lays a micro-batch out on the CPU in the engine's ``sequence_layout``
(:mod:`rlloom_enginekit.packing`: ``shared_prompt`` and ``packed`` drop padding, the first also runs
each distinct prompt once; ``padded`` is the plain ``[b, P + R]`` forward) together with the index of
the final hidden state that predicts each real response token: everything that depends on the masks'
values is decided there, so the forward on the GPU never waits to read a value back.
:func:`response_states` runs the base transformer once on it and keeps those hidden states.
:func:`score_responses` applies the LM head to them chunk by chunk with
:func:`rlloom_fsdp.head.chunked_log_probs`, so no ``[b, R, V]`` logits tensor exists, in any dtype,
in forward or backward; :func:`score_values` applies a critic's value head.

With sequence parallelism each rank runs its share of the packed slots (:func:`split_sequence`)
and the per-token results are gathered over its group before they are placed in rows
(:meth:`ModelInput.gather`, :mod:`rlloom_fsdp.sequence_parallel`).

Both are registered on the sharded root module as FSDP forward methods (:func:`attach_scorer`):
FSDP2 then all-gathers the root's own parameters (embeddings, final norm, LM or value head) around
them and reduce-scatters their gradients in backward, as it does for ``forward``; each decoder
layer is its own FSDP unit and gathers itself.
"""

from __future__ import annotations

import dataclasses
import types

import torch
from torch import nn
from torch.distributed.fsdp import register_fsdp_forward_method
from torch.nn.attention.flex_attention import BlockMask

from rlloom.batch import Batch
from rlloom_enginekit.packing import Packing, pack_rows
from rlloom_enginekit.sequences import concat_prompt_response

from rlloom_fsdp.attention import FLEX, VARLEN, kernel_of, packing_block_mask, sequence_runs
from rlloom_fsdp.config import PACKED_ATTENTION
from rlloom_fsdp.head import chunked_log_probs
from rlloom_fsdp.sequence_parallel import SequenceGroups, TokenShard


@dataclasses.dataclass
class ModelInput:
    """One micro-batch as one base-transformer forward takes it (:func:`model_input`).

    ``input_ids``, ``position_ids`` [k, W]; ``predictors`` [n]: for each real response token, row-major
    over ``response_mask`` [b, R], the flat index (``row * W + slot``) of the state that predicts it;
    ``targets`` [n]: those tokens; ``positions`` [n]: their flat indices in ``response_mask``. The attention mask: ``padding_mask`` [b, P + R] (0/1) in the padded
    layout, else the packing's ``segments`` and ``owners`` [k, W] (:class:`rlloom_enginekit.packing.Packing`)
    and its ``runs`` (:func:`rlloom_fsdp.attention.sequence_runs`, read on the CPU).
    ``tokens``: the real (non-padding) tokens the forward runs over, counted on the CPU.
    ``shard``: under sequence parallelism this rank's part (:func:`split_sequence`): then ``input_ids``,
    ``position_ids``, ``predictors`` and ``targets`` are its own, the rest the whole micro-batch's.
    """

    input_ids: torch.Tensor
    position_ids: torch.Tensor
    predictors: torch.Tensor
    targets: torch.Tensor
    positions: torch.Tensor
    response_mask: torch.Tensor
    tokens: int
    padding_mask: torch.Tensor | None = None
    segments: torch.Tensor | None = None
    owners: torch.Tensor | None = None
    runs: tuple | None = None
    shard: TokenShard | None = None

    def to(self, device: torch.device) -> ModelInput:
        """The same input on ``device``; copies from the CPU are queued without waiting for them."""
        return dataclasses.replace(self, **{
            field.name: value.to(device, non_blocking=True)
            for field in dataclasses.fields(self)
            if isinstance(value := getattr(self, field.name), (torch.Tensor, TokenShard))
        })

    def gather(self, values: torch.Tensor) -> torch.Tensor:
        """Per-token ``values`` of this rank's ``predictors`` -> those of every response token [n]
        (:meth:`rlloom_fsdp.sequence_parallel.TokenShard.gather`; as they are without a ``shard``)."""
        return values if self.shard is None else self.shard.gather(values)

    def attention_inputs(self, base: nn.Module) -> dict[str, torch.Tensor | BlockMask | tuple | None]:
        """The keyword arguments of ``base``'s forward that say what each slot attends to: the padding
        mask, or the packing's per-sequence mask — a block mask for :data:`rlloom_fsdp.attention.FLEX`
        (:func:`rlloom_fsdp.attention.packing_block_mask`), no mask but the ``sequence_runs`` (which
        transformers hands the attention function) for :data:`rlloom_fsdp.attention.VARLEN`, else
        :func:`packed_attention_mask`."""
        if self.padding_mask is not None:
            return {"attention_mask": self.padding_mask}
        kernel = kernel_of(base.config._attn_implementation)
        if kernel == VARLEN:
            return {"attention_mask": None, "sequence_runs": self.runs}
        if kernel == FLEX:
            return {"attention_mask": packing_block_mask(self.segments, self.owners)}
        packing = Packing(self.input_ids, self.position_ids, self.segments, self.owners, self.predictors)
        return {"attention_mask": packed_attention_mask(base, packing.attention_mask())}


def model_input(micro: Batch, layout: str, groups: SequenceGroups | None = None) -> ModelInput:
    """``micro`` (on the CPU) laid out in ``layout``: in ``padded`` the joined ``[b, P + R]`` rows
    (:func:`rlloom_enginekit.sequences.concat_prompt_response`), whose state at ``P − 1 + t`` predicts
    response token t; else :func:`rlloom_enginekit.packing.pack_rows`, and with sequence parallelism
    (``groups`` of size > 1) this rank's share of it (:func:`split_sequence`)."""
    response_mask = micro["response_mask"]
    positions = response_mask.bool().flatten().nonzero().squeeze(1)
    targets = micro["responses"].flatten()[positions]
    if layout == "padded":
        input_ids, padding_mask, position_ids = concat_prompt_response(micro)
        rows, columns = positions // response_mask.shape[1], positions % response_mask.shape[1]
        predictors = rows * input_ids.shape[1] + micro["prompts"].shape[1] - 1 + columns
        return ModelInput(input_ids, position_ids, predictors, targets, positions, response_mask,
                          tokens=int(padding_mask.sum()), padding_mask=padding_mask)
    packing = pack_rows(micro, share_prompts=layout == "shared_prompt")
    whole = ModelInput(packing.input_ids, packing.position_ids, packing.predictors, targets, positions, response_mask,
                       tokens=int((packing.segments >= 0).sum()), segments=packing.segments, owners=packing.owners,
                       runs=sequence_runs(packing.segments, packing.owners))
    return whole if groups is None or groups.size == 1 else split_sequence(whole, groups)


def split_sequence(inputs: ModelInput, groups: SequenceGroups) -> ModelInput:
    """Rank r's share of a packed input ``[k, W]`` in a sequence-parallel group of SP ranks: the
    packs padded to width SP·w (w = ⌈W / SP⌉; padding as the packing's own: segment −1) and its slots
    ``[r·w, (r+1)·w)`` of each; its predictors are those in its slots (re-indexed to ``[k, w]``), with
    their targets; the mask's ``segments``, ``owners`` and ``runs`` stay whole
    (:mod:`rlloom_fsdp.sequence_parallel`)."""
    width = inputs.input_ids.shape[1]
    slots = -(-width // groups.size)
    room = slots * groups.size - width
    span = slice(groups.rank * slots, (groups.rank + 1) * slots)
    pack, slot = inputs.predictors // width, inputs.predictors % width
    owner = slot // slots
    mine = (owner == groups.rank).nonzero().squeeze(1)
    shard = TokenShard(groups.group, groups.rank, tuple(torch.bincount(owner, minlength=groups.size).tolist()),
                       torch.argsort(owner, stable=True))
    return dataclasses.replace(
        inputs, input_ids=nn.functional.pad(inputs.input_ids, (0, room))[:, span].contiguous(),
        position_ids=nn.functional.pad(inputs.position_ids, (0, room))[:, span].contiguous(),
        predictors=pack[mine] * slots + slot[mine] - span.start, targets=inputs.targets[mine],
        segments=nn.functional.pad(inputs.segments, (0, room), value=-1),
        owners=nn.functional.pad(inputs.owners, (0, room), value=-1), shard=shard,
    )


def packed_attention_mask(base: nn.Module, mask: torch.Tensor) -> torch.Tensor:
    """The packing's boolean mask in the form ``base``'s attention implementation takes: additive
    (0 / the dtype's min) in float32 for eager attention, which adds it to the scores, and for SDPA in
    the dtype the model computes in (its input embedding's, gathered in that dtype during the forward):
    SDPA would otherwise turn a boolean mask into such a tensor in every layer and keep each copy for
    backward (one [k, 1, W, W] per layer; this one is shared by all)."""
    implementation = kernel_of(base.config._attn_implementation)
    if implementation not in PACKED_ATTENTION:
        raise ValueError(
            f"train_engine.sequence_layout needs one of the attention implementations {list(PACKED_ATTENTION)} for "
            f"its per-sequence mask; this model uses {implementation!r}: set train_engine.sequence_layout=padded"
        )
    dtype = torch.float32 if implementation == "eager" else base.get_input_embeddings().weight.dtype
    return torch.zeros(mask.shape, dtype=dtype, device=mask.device).masked_fill(~mask, torch.finfo(dtype).min)


def response_states(base: nn.Module, inputs: ModelInput) -> torch.Tensor:
    """Final hidden states [n, H] of the base transformer ``base`` that predict the n real response
    tokens of ``inputs``, row-major over its ``response_mask``."""
    states = base(
        input_ids=inputs.input_ids,
        position_ids=inputs.position_ids,
        use_cache=False,
        **inputs.attention_inputs(base),
    ).last_hidden_state
    return states.flatten(0, 1)[inputs.predictors]


def scatter_to_rows(values: torch.Tensor, inputs: ModelInput) -> torch.Tensor:
    """Per-token ``values`` [n] (row-major over the real tokens) as [b, R] float32, 0 on padding:
    placed at ``inputs.positions`` (by index; a mask would make backward select by it, which on a GPU
    waits to learn how many it selects), into a fresh tensor (not a view, which FSDP2 warns about)."""
    rows, width = inputs.response_mask.shape
    index = (inputs.positions // width, inputs.positions % width)
    return torch.zeros(rows, width, dtype=torch.float32, device=values.device).index_put(index, values.float())


def score_responses(
    model: nn.Module, inputs: ModelInput, temperature: float, entropy: bool, chunk_rows: int
) -> tuple[torch.Tensor, torch.Tensor | None]:
    """``(log_probs [b, R], entropy [b, R] or None)`` in float32 under softmax(logits / T), 0 where
    ``response_mask`` is 0; differentiable. ``model`` is a Hugging Face causal LM (its
    ``base_model`` and output embeddings are used)."""
    hidden = response_states(model.base_model, inputs)
    head = model.get_output_embeddings()
    log_probs, entropies = chunked_log_probs(
        hidden, head.weight, inputs.targets, temperature, entropy=entropy, chunk_rows=chunk_rows, bias=head.bias,
    )
    return (scatter_to_rows(inputs.gather(log_probs), inputs),
            None if entropies is None else scatter_to_rows(inputs.gather(entropies), inputs))


def score_values(critic: nn.Module, inputs: ModelInput) -> torch.Tensor:
    """Values [b, R] float32 of a :class:`rlloom_fsdp.model.CriticModel`, 0 where ``response_mask``
    is 0; differentiable. V_t is read at the state that predicts response token t."""
    hidden = response_states(critic.base, inputs)
    return scatter_to_rows(inputs.gather(critic.value(hidden)), inputs)


def attach_scorer(model: nn.Module, critic: bool) -> None:
    """Give the (already sharded) ``model`` a ``score_responses(...)`` method — ``score_values(...)``
    for a critic — taking the arguments of :func:`score_responses` (:func:`score_values`) after
    ``model``, that runs as an FSDP forward."""
    method = score_values if critic else score_responses
    setattr(model, method.__name__, types.MethodType(method, model))
    register_fsdp_forward_method(model, method.__name__)
