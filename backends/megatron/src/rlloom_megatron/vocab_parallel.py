"""Log-probs and entropy of target tokens from logits split over the vocabulary (tensor
parallelism), without gathering the full vocabulary on any rank.

Rank r of the TP group holds ``logits[..., v]`` for v in [start_r, start_r + V_r). With z = logits/T
(entries at or beyond the real vocabulary size, Megatron's padding, set to -inf):

    m = max_v z (all-reduce MAX, no gradient: a shift)      S = Σ_r Σ_{v in r} exp(z_v - m)
    log p(t) = (z_t - m) - log S                              (z_t from the rank that holds t)
    H = log S - Σ_r Σ_{v in r} p_v (z_v - m)                   p_v = exp(z_v - m) / S

Each sum over ranks is an all-reduce whose backward passes the gradient through unchanged
(megatron-core's ``reduce_from_tensor_model_parallel_region``): every TP rank computes the same
loss from the reduced values, so each rank's share receives that loss's gradient.
"""

from __future__ import annotations

import torch
import torch.distributed as dist


def _sum_over_ranks(local: torch.Tensor, group) -> torch.Tensor:
    from megatron.core.tensor_parallel.mappings import reduce_from_tensor_model_parallel_region

    if dist.get_world_size(group) == 1:
        return local
    return reduce_from_tensor_model_parallel_region(local, group=group)


def vocab_parallel_log_probs(
    logits: torch.Tensor, targets: torch.Tensor, vocab_start: int, vocab_size: int, temperature: float,
    group, entropy: bool,
) -> tuple[torch.Tensor, torch.Tensor | None]:
    """``(log p(targets), entropy or None)``, both shaped like ``targets`` and float32, from this
    rank's ``logits`` [..., V_r] (any dtype) holding vocabulary entries [vocab_start, vocab_start + V_r)
    of a ``vocab_size``-token vocabulary."""
    z = logits.float() / temperature
    local = z.shape[-1]
    ids = torch.arange(vocab_start, vocab_start + local, device=z.device)
    z = z.masked_fill(ids >= vocab_size, float("-inf"))
    shift = z.detach().amax(dim=-1, keepdim=True)
    if dist.get_world_size(group) > 1:
        dist.all_reduce(shift, op=dist.ReduceOp.MAX, group=group)
    z = z - shift
    exp = z.exp()
    log_total = _sum_over_ranks(exp.sum(dim=-1), group).log()
    held = (targets >= vocab_start) & (targets < vocab_start + local)
    index = (targets - vocab_start).clamp(0, local - 1)
    target_z = z.gather(-1, index.unsqueeze(-1)).squeeze(-1).masked_fill(~held, 0.0)
    log_probs = _sum_over_ranks(target_z, group) - log_total
    if not entropy:
        return log_probs, None
    probs = exp / log_total.exp().unsqueeze(-1)
    expected_z = _sum_over_ranks((probs * z.masked_fill(probs == 0, 0.0)).sum(dim=-1), group)
    return log_probs, log_total - expected_z
