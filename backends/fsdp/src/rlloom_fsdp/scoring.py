"""Response log-probs and entropy of a causal LM, and a critic's values, each as one FSDP forward of
the whole model.

:func:`response_states` runs the base transformer once over a micro-batch in the engine's
``sequence_layout`` (:mod:`rlloom_enginekit.packing`: ``shared_prompt`` and ``packed`` drop padding, the
first also runs each distinct prompt once; ``padded`` is the plain ``[b, P + R]`` forward) and
keeps the final hidden states that predict real response tokens. :func:`score_responses` applies
the LM head to them chunk by chunk with :func:`rlloom_fsdp.head.chunked_log_probs`, so no ``[b, R, V]``
logits tensor exists, in any dtype, in forward or backward; :func:`score_values` applies a
critic's value head.

Both are registered on the sharded root module as FSDP forward methods (:func:`attach_scorer`):
FSDP2 then all-gathers the root's own parameters (embeddings, final norm, LM or value head) around
them and reduce-scatters their gradients in backward, as it does for ``forward``; each decoder
layer is its own FSDP unit and gathers itself.
"""

from __future__ import annotations

import types

import torch
from torch import nn
from torch.distributed.fsdp import register_fsdp_forward_method

from rlloom.batch import Batch
from rlloom_enginekit.packing import pack_rows
from rlloom_enginekit.sequences import concat_prompt_response, response_logits

from rlloom_fsdp.config import PACKED_ATTENTION
from rlloom_fsdp.head import chunked_log_probs


def packed_attention_mask(base: nn.Module, mask: torch.Tensor) -> torch.Tensor:
    """The packing's boolean mask in the form ``base``'s attention implementation takes: as is for
    SDPA, additive (0 / float32 min) for eager attention, which adds it to the scores."""
    implementation = base.config._attn_implementation
    if implementation not in PACKED_ATTENTION:
        raise ValueError(
            f"train_engine.sequence_layout needs one of the attention implementations {list(PACKED_ATTENTION)} for "
            f"its per-sequence mask; this model uses {implementation!r}: set train_engine.sequence_layout=padded"
        )
    if implementation == "eager":
        return torch.zeros(mask.shape, device=mask.device).masked_fill(~mask, torch.finfo(torch.float32).min)
    return mask


def response_states(base: nn.Module, micro: Batch, layout: str) -> torch.Tensor:
    """Final hidden states [n, H] of the base transformer ``base`` that predict the n real response
    tokens of ``micro``, row-major over ``response_mask``, computed in ``layout``."""
    if layout == "padded":
        input_ids, attention_mask, position_ids = concat_prompt_response(micro)
        states = base(
            input_ids=input_ids, attention_mask=attention_mask, position_ids=position_ids, use_cache=False
        ).last_hidden_state
        hidden = response_logits(states, micro["prompts"].shape[1], micro["responses"].shape[1])
        return hidden[micro["response_mask"].bool()]
    packing = pack_rows(micro, share_prompts=layout == "shared_prompt")
    states = base(
        input_ids=packing.input_ids,
        attention_mask=packed_attention_mask(base, packing.attention_mask()),
        position_ids=packing.position_ids,
        use_cache=False,
    ).last_hidden_state
    return packing.response_states(states)


def as_micro_batch(prompts, prompt_mask, responses, response_mask) -> Batch:
    """The four tensors an FSDP forward method receives (FSDP hooks see tensors, not a Batch)."""
    return Batch(
        {"prompts": prompts, "prompt_mask": prompt_mask, "responses": responses, "response_mask": response_mask},
        batch_size=len(prompts),
    )


def scatter_to_rows(values: torch.Tensor, response_mask: torch.Tensor) -> torch.Tensor:
    """Per-token ``values`` [n] (row-major over the real tokens) as [b, R] float32, 0 on padding."""
    real = response_mask.bool()
    return torch.zeros(real.shape, dtype=torch.float32, device=values.device).masked_scatter(real, values.float())


def score_responses(
    model: nn.Module,
    prompts: torch.Tensor,
    prompt_mask: torch.Tensor,
    responses: torch.Tensor,
    response_mask: torch.Tensor,
    temperature: float,
    entropy: bool,
    layout: str,
    chunk_rows: int,
) -> tuple[torch.Tensor, torch.Tensor | None]:
    """``(log_probs [b, R], entropy [b, R] or None)`` in float32 under softmax(logits / T), 0 where
    ``response_mask`` is 0; differentiable. ``model`` is a Hugging Face causal LM (its
    ``base_model`` and output embeddings are used)."""
    micro = as_micro_batch(prompts, prompt_mask, responses, response_mask)
    hidden = response_states(model.base_model, micro, layout)
    head = model.get_output_embeddings()
    log_probs, entropies = chunked_log_probs(
        hidden, head.weight, responses[response_mask.bool()], temperature,
        entropy=entropy, chunk_rows=chunk_rows, bias=head.bias,
    )
    return scatter_to_rows(log_probs, response_mask), (
        scatter_to_rows(entropies, response_mask) if entropies is not None else None
    )


def score_values(
    critic: nn.Module,
    prompts: torch.Tensor,
    prompt_mask: torch.Tensor,
    responses: torch.Tensor,
    response_mask: torch.Tensor,
    layout: str,
) -> torch.Tensor:
    """Values [b, R] float32 of a :class:`rlloom_fsdp.model.CriticModel`, 0 where ``response_mask``
    is 0; differentiable. V_t is read at the state that predicts response token t."""
    micro = as_micro_batch(prompts, prompt_mask, responses, response_mask)
    hidden = response_states(critic.base, micro, layout)
    return scatter_to_rows(critic.value(hidden), response_mask)


def attach_scorer(model: nn.Module, critic: bool) -> None:
    """Give the (already sharded) ``model`` a ``score_responses(...)`` method — ``score_values(...)``
    for a critic — taking the arguments of :func:`score_responses` (:func:`score_values`) after
    ``model``, that runs as an FSDP forward."""
    method = score_values if critic else score_responses
    setattr(model, method.__name__, types.MethodType(method, model))
    register_fsdp_forward_method(model, method.__name__)
