"""DAPO's overlong reward shaping: a soft length penalty inside the last tokens of the budget."""

from __future__ import annotations

import torch

from rlloom.batch import Batch


def overlong_penalty(lengths: torch.Tensor, max_len: int, buffer_len: int, factor: float) -> torch.Tensor:
    """Per-response penalty [B] (float32, ≤ 0) for response lengths ``lengths`` [B]:

        p = min(0, −(len − (L_max − L_buf)) / L_buf · factor)

    0 up to L_max − L_buf tokens, then falling linearly to −factor at L_max.
    """
    if not 1 <= buffer_len <= max_len:
        raise ValueError(
            f"overlong_buffer_len must be in [1, max_new_tokens={max_len}], got {buffer_len}"
        )
    excess = lengths.to(torch.float32) - (max_len - buffer_len)
    return torch.clamp(-excess / buffer_len * factor, max=0.0)


def apply_overlong_penalty(batch: Batch, buffer_len: int, factor: float) -> torch.Tensor:
    """Add :func:`overlong_penalty` (L_max = ``batch.meta["max_new_tokens"]``) to ``scores`` and to
    ``token_level_scores`` on each response's last token (an empty response has no penalty);
    returns the penalties [B]."""
    batch.require("scores", "token_level_scores", "response_mask")
    if "max_new_tokens" not in batch.meta:
        raise KeyError("overlong shaping needs batch.meta['max_new_tokens'] (set by StepContext.generate)")
    lengths = batch["response_mask"].sum(dim=1)
    penalty = overlong_penalty(lengths, int(batch.meta["max_new_tokens"]), buffer_len, factor)
    batch["scores"] = batch["scores"] + penalty
    token_level = batch["token_level_scores"].clone()
    rows = torch.nonzero(lengths > 0).squeeze(1)
    token_level[rows, lengths[rows] - 1] += penalty[rows]
    batch["token_level_scores"] = token_level
    return penalty
