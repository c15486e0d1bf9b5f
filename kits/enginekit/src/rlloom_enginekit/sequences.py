"""The causal-LM input of a train engine's passes (prompt + response rows joined), the logits that
predict the response, their log-probs and entropy, and the policy temperature they are scored at."""

from __future__ import annotations

import torch

from rlloom.batch import Batch, response_attention

TRAIN_INPUT_FIELDS = ("prompts", "prompt_mask", "responses", "response_mask")
"""The fields a train engine's ``compute_log_probs``, ``compute_values`` and ``train_step`` read."""


def policy_temperature(batch: Batch) -> float:
    """T of the policy softmax(logits / T) a train engine scores ``batch`` with: ``batch.meta["temperature"]``
    (the rollout's sampling temperature, default 1); a ValueError unless it is > 0."""
    temperature = float(batch.meta.get("temperature", 1.0))
    if not temperature > 0:
        raise ValueError(f"batch.meta['temperature'] must be > 0, got {temperature}")
    return temperature


def concat_prompt_response(batch: Batch) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Join left-padded prompts and right-padded responses into one causal-LM input.

    Returns ``input_ids`` [B, P+R], ``attention_mask`` [B, P+R] (``prompt_mask`` then the response
    tokens the model reads, :func:`rlloom.batch.response_attention`: an agent's tool tokens included) and ``position_ids`` [B, P+R] = cumsum(attention_mask) - 1, clamped at 0, so
    the first real prompt token is at position 0 whatever the padding.

    The logits at positions ``P-1 … P+R-2`` predict the response tokens.
    """
    batch.require("prompts", "prompt_mask", "responses", "response_mask")
    input_ids = torch.cat([batch["prompts"], batch["responses"]], dim=1)
    attention_mask = torch.cat([batch["prompt_mask"], response_attention(batch)], dim=1)
    position_ids = (attention_mask.cumsum(dim=1) - 1).clamp(min=0)
    return input_ids, attention_mask, position_ids


def token_log_probs(logits: torch.Tensor, tokens: torch.Tensor) -> torch.Tensor:
    """log softmax(logits)[tokens] in float32: logits [B, R, V], tokens [B, R] -> [B, R]."""
    logits = logits.float()
    picked = torch.gather(logits, -1, tokens.unsqueeze(-1)).squeeze(-1)
    return picked - torch.logsumexp(logits, dim=-1)


def token_entropy(logits: torch.Tensor) -> torch.Tensor:
    """Entropy of softmax(logits) per position in float32: [B, R, V] -> [B, R]."""
    logits = logits.float()
    log_p = torch.log_softmax(logits, dim=-1)
    return -(log_p.exp() * log_p).sum(-1)
