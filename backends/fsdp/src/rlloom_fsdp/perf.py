"""Model FLOPs utilisation (MFU) of a training step.

MFU = (6 · N · tokens) / (seconds · peak), the standard estimate: a forward and backward cost
6 FLOPs per matmul parameter per token (Kaplan et al., 2020). N counts the parameters that take
part in matrix multiplications: every parameter except an input embedding that is only looked up
(with tied embeddings the matrix is the LM head's, so it counts once). Attention-score FLOPs
(about 12 · layers · hidden · context per token) are left out, so the estimate reads a little low
for long contexts; ``tokens`` are the step's prompt and response tokens (what a plain forward over
the batch processes), whatever the engine saves with the shared-prompt forward. The peak is the
GPU's dense bf16 figure (:func:`rlloom_enginekit.devices.peak_bf16_flops`).
"""

from __future__ import annotations

import torch
from torch import nn

from rlloom_enginekit.devices import peak_bf16_flops


def train_flops(model: nn.Module) -> float:
    """6 · N: training FLOPs per token of ``model`` (see the module doc for N). Call before
    sharding, while parameters have their full shapes."""
    base = getattr(model, model.base_model_prefix, model) if hasattr(model, "base_model_prefix") else model
    embedding = base.get_input_embeddings().weight
    output = model.get_output_embeddings() if hasattr(model, "get_output_embeddings") else None
    tied = output is not None and output.weight is embedding
    unique = {id(p): p for p in model.parameters()}
    matmul = sum(p.numel() for p in unique.values()) - (0 if tied else embedding.numel())
    return 6.0 * matmul


def mfu(flops: float, seconds: float, device: torch.device) -> float | None:
    """``flops / (seconds · peak)`` for ``device``; None when its peak is unknown or no time passed."""
    peak = peak_bf16_flops(device)
    if peak is None or seconds <= 0:
        return None
    return flops / (seconds * peak)
