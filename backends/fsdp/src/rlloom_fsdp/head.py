"""Response log-probs and entropy through the LM head, a chunk of tokens at a time.

For N response positions with final hidden states h [N, H], LM head weight W [V, H] (bias b [V]
or none), target tokens t [N] and temperature T > 0:

    z_i = (h_i W^T + b) / T                   computed in float32
    log_prob_i = z_i[t_i] - logsumexp(z_i)
    entropy_i  = logsumexp(z_i) - sum_v p_iv z_iv,     p_i = softmax(z_i)

The products h W^T (and those of backward) are formed in one of two ways (:func:`head_products`):
bfloat16 or float16 h and W on a CUDA GPU (the FSDP engine's default there) are multiplied as they
are, on tensor cores, with float32 accumulation and a float32 result (``torch.mm(..., out_dtype=
torch.float32)``): each product of two 16-bit numbers is exact in float32, so z equals the float32
product of the upcast operands up to the order of the float32 sums, at the tensor cores' speed (the
float32 product of upcast operands runs on the GPU's much slower float32 units). Backward's two
products take the float32 dL/dz rounded to the operands' dtype (as a bf16 model's backward does for
its logits). Anything else (float32 inputs, the CPU) is multiplied in float32 on float32 copies.

A plain computation keeps [N, V] float32 logits plus the softmax copies autograd saves for
backward (for SmolLM2, V = 49,152: 200 kB per token and tensor). :func:`chunked_log_probs` holds
at most ``chunk_rows`` rows of logits at once, in forward and in backward, and saves only its
inputs and two [N] vectors (log-sum-exp and entropy) for backward, which recomputes each chunk's
logits — unless all N rows fit in one chunk: then forward keeps that chunk's logits for backward
instead (at most ``chunk_rows`` × V floats, held from forward to backward) and no logits are
recomputed. Memory beyond the inputs: a float32 gradient accumulator for W in backward (V · H · 4
bytes), one chunk's [chunk_rows, V] float32 logits and probabilities, and on the float32 path a
float32 copy of W when W is not float32 (made once per call). Compute: with several chunks one
more head matmul than a plain backward (the recomputation); with one chunk the same as a plain
backward.

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

from rlloom_enginekit.devices import tensor_core_operands

# One chunk's float32 logits (and as many again for their softmax) stay near this many bytes.
CHUNK_LOGITS_BYTES = 64 * 2**20


def default_chunk_rows(vocab_size: int) -> int:
    """Rows per chunk so that one chunk's float32 logits take about :data:`CHUNK_LOGITS_BYTES`
    (64 MiB: 341 rows for a 49k vocabulary, 110 for a 152k one); at least 1."""
    return max(1, CHUNK_LOGITS_BYTES // (4 * vocab_size))


class Float32Products:
    """The head's products on float32 copies of h, W and b (float32 inputs, the CPU)."""

    def __init__(self, weight: torch.Tensor, bias: torch.Tensor | None) -> None:
        self.weight32 = weight.float()
        self.bias32 = None if bias is None else bias.float()

    def logits(self, hidden: torch.Tensor) -> torch.Tensor:
        """h W^T + b in float32 for one chunk of rows."""
        return torch.nn.functional.linear(hidden.float(), self.weight32, self.bias32)

    def hidden_grad(self, grad_logits: torch.Tensor) -> torch.Tensor:
        """dL/dz W in float32."""
        return grad_logits @ self.weight32

    def add_weight_grad(self, accumulator: torch.Tensor, grad_logits: torch.Tensor, hidden: torch.Tensor) -> None:
        """accumulator += dL/dz^T h (float32)."""
        accumulator.addmm_(grad_logits.t(), hidden.float())


class TensorCoreProducts:
    """The head's products of 16-bit h and W on a CUDA GPU: in their dtype, float32 accumulation and
    result (module docstring); dL/dz enters backward's products rounded to that dtype."""

    def __init__(self, weight: torch.Tensor, bias: torch.Tensor | None) -> None:
        self.weight = weight
        self.bias32 = None if bias is None else bias.float()

    def logits(self, hidden: torch.Tensor) -> torch.Tensor:
        logits = torch.mm(hidden, self.weight.t(), out_dtype=torch.float32)
        return logits if self.bias32 is None else logits + self.bias32

    def hidden_grad(self, grad_logits: torch.Tensor) -> torch.Tensor:
        return torch.mm(grad_logits.to(self.weight.dtype), self.weight, out_dtype=torch.float32)

    def add_weight_grad(self, accumulator: torch.Tensor, grad_logits: torch.Tensor, hidden: torch.Tensor) -> None:
        accumulator += torch.mm(grad_logits.to(self.weight.dtype).t(), hidden, out_dtype=torch.float32)


def head_products(hidden: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None):
    """:class:`TensorCoreProducts` for bfloat16 or float16 ``hidden`` and ``weight`` of one dtype on a
    CUDA GPU, else :class:`Float32Products`."""
    return (TensorCoreProducts if tensor_core_operands(hidden, weight) else Float32Products)(weight, bias)


class _ChunkedHead(torch.autograd.Function):
    """Forward: (log_probs [N], entropy [N]); backward: see the module docstring."""

    @staticmethod
    def forward(ctx, hidden, weight, bias, tokens, temperature, chunk_rows, with_entropy):
        products = head_products(hidden, weight, bias)
        rows = hidden.shape[0]
        log_probs = torch.empty(rows, dtype=torch.float32, device=hidden.device)
        log_norm = torch.empty_like(log_probs)
        entropy = torch.empty_like(log_probs)
        logits = None
        for start in range(0, rows, chunk_rows):
            end = min(start + chunk_rows, rows)
            logits = products.logits(hidden[start:end]) / temperature
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
        products = head_products(hidden, weight, bias)
        want_hidden, want_weight, want_bias = ctx.needs_input_grad[:3]
        grad_hidden = torch.empty_like(hidden) if want_hidden else None
        grad_weight32 = torch.zeros(weight.shape, dtype=torch.float32, device=weight.device) if want_weight else None
        grad_bias32 = torch.zeros(bias.shape, dtype=torch.float32, device=bias.device) if want_bias else None
        for start in range(0, hidden.shape[0], chunk_rows):
            end = min(start + chunk_rows, hidden.shape[0])
            chunk = hidden[start:end]
            logits = kept_logits if kept_logits is not None else products.logits(chunk) / temperature
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
                grad_hidden[start:end] = products.hidden_grad(grad_logits).to(hidden.dtype)
            if want_weight:
                products.add_weight_grad(grad_weight32, grad_logits, chunk)
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
