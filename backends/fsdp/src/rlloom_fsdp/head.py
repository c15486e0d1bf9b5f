"""Response log-probs and entropy through the LM head, a chunk of tokens at a time.

For N response positions with final hidden states h [N, H], LM head weight W [V, H] (bias b [V]
or none), target tokens t [N] and temperature T > 0:

    z_i = (h_i W^T + b) / T                   computed in float32
    log_prob_i = z_i[t_i] - logsumexp(z_i)
    entropy_i  = logsumexp(z_i) - sum_v p_iv z_iv,     p_i = softmax(z_i)

A plain computation keeps [N, V] float32 logits plus the softmax copies autograd saves for
backward (for SmolLM2, V = 49,152: 200 kB per token and tensor). :func:`chunked_log_probs` holds
at most ``chunk_rows`` rows of logits at once, in forward and in backward, and saves only its
inputs and two [N] vectors (log-sum-exp and entropy) for backward, which recomputes each chunk's
logits — unless all N rows fit in one chunk: then forward keeps that chunk's logits for backward
instead (at most ``chunk_rows`` × V floats, held from forward to backward) and no logits are
recomputed. Memory beyond the inputs: one float32 copy of W (V · H · 4 bytes, made once per call
when W is not float32) and its float32 gradient accumulator in backward, plus one chunk's
[chunk_rows, V] float32 logits and probabilities. Compute: with several chunks one more head
matmul than a plain backward (the recomputation); with one chunk the same as a plain backward.

Gradients (per row i, with p = softmax(z), g and e the incoming gradients of log_prob_i and
entropy_i):

    d log_prob_i / d z_i = onehot(t_i) - p_i
    d entropy_i  / d z_i = -p_i * (z_i - sum_v p_iv z_iv) = -p_i * (z_i - logsumexp(z_i) + entropy_i)
    G_i = g_i (onehot(t_i) - p_i) - e_i p_i (z_i - logsumexp(z_i) + entropy_i)      (d loss / d z_i)
    d h_i = (G_i W) / T,   d W = sum_i G_i^T h_i / T,   d b = sum_i G_i / T

Results are float32; gradients come back in the inputs' dtypes (accumulated in float32).
"""

from __future__ import annotations

import torch

# One chunk's float32 logits (and as many again for their softmax) stay near this many bytes.
CHUNK_LOGITS_BYTES = 64 * 2**20


def default_chunk_rows(vocab_size: int) -> int:
    """Rows per chunk so that one chunk's float32 logits take about :data:`CHUNK_LOGITS_BYTES`
    (64 MiB: 341 rows for a 49k vocabulary, 110 for a 152k one); at least 1."""
    return max(1, CHUNK_LOGITS_BYTES // (4 * vocab_size))


def _chunk_logits(hidden: torch.Tensor, weight32: torch.Tensor, bias32: torch.Tensor | None,
                  temperature: float) -> torch.Tensor:
    """z = (h W^T + b) / T in float32 for one chunk of rows."""
    return torch.nn.functional.linear(hidden.float(), weight32, bias32) / temperature


class _ChunkedHead(torch.autograd.Function):
    """Forward: (log_probs [N], entropy [N]); backward: see the module docstring."""

    @staticmethod
    def forward(ctx, hidden, weight, bias, tokens, temperature, chunk_rows, with_entropy):
        weight32 = weight.float()
        bias32 = None if bias is None else bias.float()
        rows = hidden.shape[0]
        log_probs = torch.empty(rows, dtype=torch.float32, device=hidden.device)
        log_norm = torch.empty_like(log_probs)
        entropy = torch.empty_like(log_probs)
        logits = None
        for start in range(0, rows, chunk_rows):
            end = min(start + chunk_rows, rows)
            logits = _chunk_logits(hidden[start:end], weight32, bias32, temperature)
            lse = torch.logsumexp(logits, dim=-1)
            log_norm[start:end] = lse
            log_probs[start:end] = logits.gather(-1, tokens[start:end, None]).squeeze(-1) - lse
            if with_entropy:
                entropy[start:end] = lse - (torch.softmax(logits, dim=-1) * logits).sum(-1)
        kept_logits = logits if rows <= chunk_rows and logits is not None else None  # one chunk: no recompute
        ctx.save_for_backward(hidden, weight, bias, tokens, log_norm, entropy, kept_logits)
        ctx.temperature, ctx.chunk_rows, ctx.with_entropy = temperature, chunk_rows, with_entropy
        return log_probs, (entropy if with_entropy else None)

    @staticmethod
    def backward(ctx, grad_log_probs, grad_entropy):
        hidden, weight, bias, tokens, log_norm, entropy, kept_logits = ctx.saved_tensors
        temperature, chunk_rows = ctx.temperature, ctx.chunk_rows
        weight32 = weight.float()
        bias32 = None if bias is None else bias.float()
        want_hidden, want_weight, want_bias = ctx.needs_input_grad[:3]
        grad_hidden = torch.empty_like(hidden) if want_hidden else None
        grad_weight32 = torch.zeros_like(weight32) if want_weight else None
        grad_bias32 = torch.zeros_like(bias32) if want_bias else None
        for start in range(0, hidden.shape[0], chunk_rows):
            end = min(start + chunk_rows, hidden.shape[0])
            chunk = hidden[start:end].float()
            logits = kept_logits if kept_logits is not None else _chunk_logits(chunk, weight32, bias32, temperature)
            probs = torch.exp(logits - log_norm[start:end, None])
            grad_logits = torch.zeros_like(logits)
            if grad_log_probs is not None:
                g = grad_log_probs[start:end]
                grad_logits -= probs * g[:, None]
                grad_logits.scatter_add_(-1, tokens[start:end, None], g[:, None])
            if ctx.with_entropy and grad_entropy is not None:
                e = grad_entropy[start:end, None]
                centred = logits - log_norm[start:end, None] + entropy[start:end, None]  # z - sum_v p z
                grad_logits -= e * probs * centred
            grad_logits /= temperature
            if want_hidden:
                grad_hidden[start:end] = (grad_logits @ weight32).to(hidden.dtype)
            if want_weight:
                grad_weight32.addmm_(grad_logits.t(), chunk)
            if want_bias:
                grad_bias32 += grad_logits.sum(0)
        return (
            grad_hidden,
            None if grad_weight32 is None else grad_weight32.to(weight.dtype),
            None if grad_bias32 is None else grad_bias32.to(bias.dtype),
            None, None, None, None,
        )


def chunked_log_probs(
    hidden: torch.Tensor,
    weight: torch.Tensor,
    tokens: torch.Tensor,
    temperature: float,
    *,
    entropy: bool,
    chunk_rows: int,
    bias: torch.Tensor | None = None,
) -> tuple[torch.Tensor, torch.Tensor | None]:
    """``(log_probs [N], entropy [N] or None)`` in float32 of ``tokens`` [N] under
    softmax((hidden [N, H] @ weight [V, H]^T + bias) / temperature), ``chunk_rows`` rows of logits
    at a time (module docstring: formulas, memory). Differentiable in ``hidden``, ``weight`` and
    ``bias``; any float dtype; any device."""
    if chunk_rows < 1:
        raise ValueError(f"chunk_rows must be >= 1, got {chunk_rows}")
    if not temperature > 0:
        raise ValueError(f"temperature must be > 0, got {temperature}")
    if hidden.dim() != 2 or tokens.shape != hidden.shape[:1] or weight.shape[1:] != hidden.shape[1:]:
        raise ValueError(f"expected hidden [N, H], weight [V, H], tokens [N]; got {tuple(hidden.shape)}, "
                         f"{tuple(weight.shape)}, {tuple(tokens.shape)}")
    return _ChunkedHead.apply(hidden, weight, bias, tokens, float(temperature), chunk_rows, entropy)
