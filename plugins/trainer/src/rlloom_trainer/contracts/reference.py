"""What the engine contracts compare against: token batches built by hand, and log-probs from a plain
transformers forward."""

from __future__ import annotations

from collections.abc import Sequence


def padded(token_rows: Sequence[Sequence[int]], pad_id: int, left: bool):
    """``(ids, mask)`` [B, longest row] int64: the rows padded with ``pad_id`` on the left (prompts) or the
    right (responses); mask 1 on tokens, 0 on padding."""
    import torch

    width = max(map(len, token_rows))
    rows = [([pad_id] * (width - len(row)), list(row)) for row in token_rows]
    ids = torch.tensor([pad + row if left else row + pad for pad, row in rows])
    mask = torch.tensor([[0] * len(pad) + [1] * len(row) if left else [1] * len(row) + [0] * len(pad)
                         for pad, row in rows])
    return ids, mask


def plain_log_probs(model, prompt, response, temperature: float):
    """log softmax(logits / T) at each token of ``response`` [R] after ``prompt`` [P] (1-D int64, no padding),
    from one forward of ``model`` over prompt + response: [R] float32."""
    import torch

    with torch.no_grad():
        logits = model(torch.cat([prompt, response])[None]).logits[0, len(prompt) - 1:-1].float()
    return torch.log_softmax(logits / temperature, dim=-1).gather(-1, response[:, None])[:, 0]


def plain_model(model_path: str):
    """The model at ``model_path`` in float32, in eval mode, through transformers alone."""
    import torch
    from transformers import AutoModelForCausalLM

    return AutoModelForCausalLM.from_pretrained(model_path, dtype=torch.float32).eval()
