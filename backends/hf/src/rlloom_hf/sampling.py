"""Choosing the next token from a row of logits, and its log-prob under the sampling policy.

The policy is ``softmax(logits / T)`` with T = ``sampling.temperature`` (T = 1 when greedy). The
token is drawn from that policy after top-k, then top-p filtering (top-p on the distribution the
top-k filter left, renormalised), or is the argmax when greedy. The reported log-prob is always
``log_softmax(logits / T)[token]`` of the **unfiltered** policy, the quantity train engines
recompute.

The logits are float32 whatever the model's dtype: :func:`use_float32_head` makes the LM head
compute them as the FSDP trainer's head does (:mod:`rlloom_fsdp.head`), from the final hidden
states and head weight in the model's dtype, products summed and returned in float32, so bf16
rollouts are not off the trainer's log-probs by a bf16 rounding of every logit.

Randomness is drawn per response (:class:`ResponseStreams`), so a response's tokens depend on the
call's seed, its prompt's index and its own index only: not on the rows batched with it, the chunk
size, or the rank a split call put it on.
"""

from __future__ import annotations

import copy
import functools

import numpy as np
import torch
import torch.nn.functional as F
from rlloom import SamplingParams
from rlloom_enginekit.devices import tensor_core_operands
from torch import nn


def float32_linear(head: nn.Linear, hidden: torch.Tensor) -> torch.Tensor:
    """``hidden @ W^T + b`` of the linear ``head`` in float32, formed as the FSDP trainer's head
    forms it (``rlloom_fsdp.head.head_products``): bfloat16 or float16 ``hidden`` and W of one dtype
    on a CUDA GPU in one product with float32 accumulation and result (``torch.mm(...,
    out_dtype=torch.float32)``: the exact 16-bit products summed in float32, no float32 copy of
    W); anything else as ``F.linear(h.float(), W.float(), b.float())``."""
    weight, bias = head.weight, head.bias
    if tensor_core_operands(hidden, weight):
        flat = torch.mm(hidden.reshape(-1, hidden.shape[-1]), weight.t(), out_dtype=torch.float32)
        logits = flat.reshape(*hidden.shape[:-1], weight.shape[0])
        return logits if bias is None else logits + bias.float()
    return F.linear(hidden.float(), weight.float(), None if bias is None else bias.float())


def use_float32_head(model: nn.Module) -> None:
    """Make ``model``'s LM head (its output embeddings, an ``nn.Linear``) return float32 logits:
    its ``forward`` becomes :func:`float32_linear`. Parameters and their names are untouched;
    what the model does after the head (e.g. Gemma 2's final logit soft-capping) then runs in
    float32. A float32 model computes exactly what it did."""
    head = model.get_output_embeddings()
    if not isinstance(head, nn.Linear):
        raise ValueError(f"the rollout needs a causal LM whose output embeddings are an nn.Linear, "
                         f"not {type(head).__name__}")
    head.forward = functools.partial(float32_linear, head)


def filter_top_k_top_p(scaled: torch.Tensor, top_k: int, top_p: float) -> torch.Tensor:
    """Set to ``-inf`` the logits [N, V] outside the top-k set, then outside the top-p nucleus.

    Top-k keeps every token whose logit is at least the k-th largest (ties at the boundary are
    all kept); ``top_k == -1`` or ``top_k >= V`` keeps all. The nucleus is the smallest set of
    most likely tokens whose probability reaches ``top_p``: a token is kept when the total
    probability of the tokens ranked above it is below ``top_p`` (so the most likely is always
    kept); ``top_p == 1`` keeps all.
    """
    vocab = scaled.shape[-1]
    if 0 < top_k < vocab:
        kth = torch.topk(scaled, top_k, dim=-1).values[:, -1:]
        scaled = scaled.masked_fill(scaled < kth, float("-inf"))
    if top_p < 1.0:
        sorted_logits, order = torch.sort(scaled, dim=-1, descending=True)
        probs = torch.softmax(sorted_logits, dim=-1)
        mass_above = torch.cumsum(probs, dim=-1) - probs
        drop_sorted = mass_above >= top_p
        drop = torch.zeros_like(drop_sorted).scatter(-1, order, drop_sorted)
        scaled = scaled.masked_fill(drop, float("-inf"))
    return scaled


class ResponseStreams:
    """One random stream per response row: the response ``copy`` of prompt ``prompt`` under ``seed``
    draws from a generator seeded with numpy's ``SeedSequence([seed, prompt, copy])``.

    ``seeds``: the call's seed, or each row's [N] int64; ``prompts`` / ``copies``: [N] int64, each
    row's prompt index in the whole call (``SamplingParams.first_prompt`` + the row's prompt within
    the batch) and its response index.
    """

    def __init__(self, seeds: int | torch.Tensor, prompts: torch.Tensor, copies: torch.Tensor,
                 device: torch.device) -> None:
        self.device = device
        row_seeds = [seeds] * len(prompts) if isinstance(seeds, int) else seeds.tolist()
        self.generators = [
            torch.Generator(device=device).manual_seed(
                int(np.random.SeedSequence([seed, prompt, copy]).generate_state(1, np.uint64)[0]) >> 1)
            for seed, prompt, copy in zip(row_seeds, prompts.tolist(), copies.tolist())
        ]

    def select(self, rows: torch.Tensor) -> ResponseStreams:
        """The streams of ``rows`` (indices into these rows), each going on from where it is."""
        chosen = copy.copy(self)
        chosen.generators = [self.generators[row] for row in rows.tolist()]
        return chosen

    def uniform(self, dtype: torch.dtype) -> torch.Tensor:
        """The next U[0, 1) draw of every row's stream: [N]."""
        return torch.cat([torch.rand(1, generator=g, device=self.device, dtype=dtype) for g in self.generators])


def sample_categorical(probs: torch.Tensor, uniform: torch.Tensor) -> torch.Tensor:
    """One index per row of ``probs`` [N, V] (non-negative, rows need not sum exactly to 1), index
    ``i`` drawn with probability ``probs[:, i] / probs.sum(-1)``, using ``uniform`` [N] ~ U[0, 1);
    returns [N] int64.

    Inverse CDF: the first ``i`` whose cumulative sum exceeds ``u * total``: one random number per
    row (``torch.multinomial`` costs ~20x more on CPU for a 50k vocabulary). A zero-probability index is never returned: its cumulative sum equals its
    predecessor's, and a ``u * total`` rounded up to ``total`` is mapped to the last index with
    positive probability.
    """
    cdf = probs.cumsum(dim=-1)
    total = cdf[:, -1:].contiguous()
    target = uniform.to(probs.dtype).unsqueeze(-1) * total
    picked = torch.searchsorted(cdf, target, right=True)
    last_positive = torch.searchsorted(cdf, total, right=False)
    return torch.minimum(picked, last_positive).squeeze(-1)


def next_tokens(
    logits: torch.Tensor, sampling: SamplingParams, streams: ResponseStreams | None
) -> tuple[torch.Tensor, torch.Tensor]:
    """Pick one token per row of ``logits`` [N, V]; return ``(tokens [N] int64, log_probs [N] float32)``.

    ``log_probs`` is ``log_softmax(logits / T)`` at the picked token (see module doc). Random draws
    come from ``streams`` only (one per row; None when greedy, which draws nothing).
    """
    scaled = logits.float() / sampling.policy_temperature
    log_probs = torch.log_softmax(scaled, dim=-1)
    if sampling.greedy:
        tokens = torch.argmax(scaled, dim=-1)
    else:
        filtered = filter_top_k_top_p(scaled, sampling.top_k, sampling.top_p)
        tokens = sample_categorical(torch.softmax(filtered, dim=-1), streams.uniform(torch.float32))
    return tokens, log_probs.gather(-1, tokens.unsqueeze(-1)).squeeze(-1)
