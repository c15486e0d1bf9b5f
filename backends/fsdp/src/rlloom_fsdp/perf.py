"""Model FLOPs utilisation (MFU) of a training step.

The standard estimate: a forward and backward cost 6 FLOPs per matmul parameter per token (Kaplan et
al., 2020): 2 forward, 2 for the gradient of the input, 2 for the gradient of the weight. A frozen parameter
(a LoRA run's base weights) has no weight gradient: 4. The engine runs the transformer over the real tokens of its model input and the LM head
(or a critic's value head) only over the real response tokens, so for one optimizer step

    FLOPs = F_body · tokens + F_head · scored,   F = Σ over parameters of (6 if trained else 4) · numel
    MFU   = FLOPs / (seconds · peak · ranks)

with ``tokens`` the real (non-padding) tokens the forwards ran over — in the ``shared_prompt`` layout
each distinct prompt of a micro-batch once, in ``packed`` and ``padded`` each row's prompt and
response, padding slots left out — and ``scored`` the real response tokens, both summed over the
micro-batches the engine trained, on every rank: rows left out as inert and the padding passes that
keep the ranks' collectives in step are not counted. ``N_head`` counts the head's parameters (with
tied embeddings the shared matrix, once); ``N_body`` every other parameter except the input embedding,
which is only looked up. Attention-score FLOPs (about 12 · layers · hidden · context per token) are
left out, so the estimate reads a little low for long contexts. ``seconds`` is the step's wall time
(device work included); the peak is the GPU's dense bf16 figure
(:func:`rlloom_enginekit.devices.peak_bf16_flops`).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

import torch
from torch import nn

from rlloom_enginekit.devices import peak_bf16_flops


@dataclass(frozen=True)
class FlopsPerToken:
    """Training FLOPs per token: ``body`` = F_body per token through the transformer, ``head`` = F_head per
    scored response token (6 per trained and 4 per frozen parameter; module docstring)."""

    body: float
    head: float

    def step(self, tokens: float, scored: float) -> float:
        """F_body · tokens + F_head · scored."""
        return self.body * tokens + self.head * scored


def train_flops(model: nn.Module, head: nn.Module) -> FlopsPerToken:
    """The :class:`FlopsPerToken` of ``model`` whose output head is ``head`` (its LM head, or a
    critic's value head). Call before sharding, while parameters have their full shapes, and after freezing
    (LoRA)."""
    base = getattr(model, model.base_model_prefix, model) if hasattr(model, "base_model_prefix") else model
    embedding = base.get_input_embeddings().weight
    head_parameters = {id(p): p for p in head.parameters()}
    left_out = {*head_parameters, id(embedding)}
    body = [p for p in {id(p): p for p in model.parameters()}.values() if id(p) not in left_out]
    return FlopsPerToken(body=_flops(body), head=_flops(head_parameters.values()))


def _flops(parameters: Iterable[nn.Parameter]) -> float:
    """Σ (6 if trained else 4) · numel: forward, input gradient, and the weight gradient when trained."""
    return float(sum((6 if p.requires_grad else 4) * p.numel() for p in parameters))


def mfu(flops: float, seconds: float, device: torch.device, ranks: int = 1) -> float | None:
    """``flops / (seconds · peak · ranks)`` for ``device``'s peak; None when the peak is unknown or no
    time passed."""
    peak = peak_bf16_flops(device)
    if peak is None or seconds <= 0:
        return None
    return flops / (seconds * peak * ranks)
