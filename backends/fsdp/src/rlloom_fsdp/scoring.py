"""Response log-probs and entropy of a causal LM, as one FSDP forward of the whole model.

:func:`score_responses` runs the base transformer (plain, or the shared-prompt forward of
:mod:`rlloom_fsdp.prefix`), keeps the final hidden states that predict real response tokens
(padding is dropped before the LM head), and applies the LM head chunk by chunk with
:func:`rlloom.head.chunked_log_probs`, so no ``[b, R, V]`` logits tensor exists, in any dtype,
in forward or backward.

It is registered on the sharded root module as an FSDP forward method
(:func:`attach_scorer`): FSDP2 then all-gathers the root's own parameters (embeddings, final
norm, LM head) around it and reduce-scatters their gradients in backward, as it does for
``forward``; each decoder layer is its own FSDP unit and gathers itself.
"""

from __future__ import annotations

import types

import torch
from torch import nn
from torch.distributed.fsdp import register_fsdp_forward_method

from rlloom.batch import Batch
from rlloom.head import chunked_log_probs
from rlloom.tokens import concat_prompt_response, response_logits

from rlloom_fsdp.prefix import shared_prefix_response_hidden

METHOD = "score_responses"


def response_hidden(base: nn.Module, micro: Batch, share_prefix: bool) -> torch.Tensor:
    """Final hidden states [b, R, H] of ``base`` at the positions P-1 … P+R-2 of prompt + response,
    i.e. those predicting the R response tokens (shared-prompt forward when ``share_prefix`` and
    the model returns a cache)."""
    hidden = shared_prefix_response_hidden(base, micro) if share_prefix else None
    if hidden is None:
        input_ids, attention_mask, position_ids = concat_prompt_response(micro)
        states = base(
            input_ids=input_ids, attention_mask=attention_mask, position_ids=position_ids, use_cache=False
        ).last_hidden_state
        hidden = response_logits(states, micro["prompts"].shape[1], micro["responses"].shape[1])
    return hidden


def score_responses(
    model: nn.Module,
    prompts: torch.Tensor,
    prompt_mask: torch.Tensor,
    responses: torch.Tensor,
    response_mask: torch.Tensor,
    temperature: float,
    entropy: bool,
    share_prefix: bool,
    chunk_rows: int,
) -> tuple[torch.Tensor, torch.Tensor | None]:
    """``(log_probs [b, R], entropy [b, R] or None)`` in float32 under softmax(logits / T), 0 where
    ``response_mask`` is 0; differentiable. ``model`` is a Hugging Face causal LM (its
    ``base_model`` and output embeddings are used)."""
    micro = Batch(
        {"prompts": prompts, "prompt_mask": prompt_mask, "responses": responses, "response_mask": response_mask},
        batch_size=len(prompts),
    )
    hidden = response_hidden(model.base_model, micro, share_prefix)
    real = response_mask.bool()
    head = model.get_output_embeddings()
    log_probs, entropies = chunked_log_probs(
        hidden[real], head.weight, responses[real], temperature,
        entropy=entropy, chunk_rows=chunk_rows, bias=head.bias,
    )
    zeros = torch.zeros(real.shape, dtype=torch.float32, device=hidden.device)
    return zeros.masked_scatter(real, log_probs), (
        zeros.masked_scatter(real, entropies) if entropies is not None else None
    )


def attach_scorer(model: nn.Module) -> None:
    """Give the (already sharded) ``model`` a ``score_responses(...)`` method (the arguments of
    :func:`score_responses` after ``model``) that runs as an FSDP forward."""
    setattr(model, METHOD, types.MethodType(score_responses, model))
    register_fsdp_forward_method(model, METHOD)
