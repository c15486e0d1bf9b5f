"""Loss building blocks shared by the algorithm plugins: pure functions over torch tensors.

Shapes: ``[B, R]`` tensors are per response token (B sequences, R padded response length); a
``mask`` is the ``response_mask`` (1/True on real tokens, 0/False on padding). Positions where the
mask is 0 never contribute: they are selected away (``torch.where``), so padding holding ``inf`` or
``nan`` cannot leak into a loss or its gradient.

The formulas follow ``ALGORITHMS.md`` (the verl conventions).
"""

from __future__ import annotations

import torch

from rlloom.batch import masked_mean
from rlloom.types import ClipLossTerms, MiniBatchStats
from rlloom_algokit.choices import AGG_MODES, KL_ESTIMATORS, ROLLOUT_IS_LEVELS, ROLLOUT_IS_MODES

LOG_RATIO_CLAMP = 20.0
"""log π − log π_old (and the rollout correction's log-weights) is clamped to ±this before ``exp``
(keeps the ratio finite: e^20 ≈ 4.9e8)."""

K3_CLAMP = 10.0
"""The k3 estimate is clamped to ±this."""


def _check_same_shape(**tensors: torch.Tensor) -> None:
    shapes = {name: tuple(t.shape) for name, t in tensors.items()}
    if len(set(shapes.values())) > 1:
        raise ValueError(f"tensors must have the same shape, got {shapes}")


def mini_batch_stats(mask: torch.Tensor) -> MiniBatchStats:
    """The counts of one batch's own ``mask`` [B, R] (no data parallelism): Σ mask, B, rows with
    at least one token, R."""
    present = mask.bool()
    return MiniBatchStats(
        num_tokens=int(present.sum()),
        num_seqs=int(present.shape[0]),
        num_nonempty_seqs=int(present.any(dim=1).sum()),
        max_response_len=int(present.shape[1]),
    )


def aggregate(
    values: torch.Tensor, mask: torch.Tensor, mode: str, stats: MiniBatchStats | None = None
) -> torch.Tensor:
    """Reduce a per-token loss ``values`` [B, R] to a scalar; ``mask`` [B, R] selects the tokens.

    With S_i = Σ_t L_it·m_it (the masked row sums) and n_i = Σ_t m_it:

    - ``token-mean``:              Σ_i S_i / num_tokens
    - ``seq-mean-token-sum``:      Σ_i S_i / num_seqs
    - ``seq-mean-token-mean``:     Σ_{i: n_i>0} (S_i / n_i) / num_nonempty_seqs   (empty rows excluded)
    - ``seq-mean-token-sum-norm``: Σ_i S_i / (num_seqs · max_response_len)        (Dr.GRPO)

    The counts come from ``stats`` when given: the *global* counts of the mini-batch these values
    are one micro-batch of, so that the results of all micro-batches (on all ranks) sum to the
    aggregate of the whole mini-batch. Without ``stats`` they are the batch's own counts
    (:func:`mini_batch_stats`). A zero count is treated as 1 (its numerator is 0 then, so the
    result is 0).
    """
    _check_same_shape(values=values, mask=mask)
    if mode not in AGG_MODES:
        raise ValueError(f"unknown loss aggregation mode {mode!r}; choose one of {list(AGG_MODES)}")
    if stats is None:
        stats = mini_batch_stats(mask)
    present = mask.bool()
    row_sums = torch.where(present, values, torch.zeros_like(values)).sum(dim=1)
    if mode == "token-mean":
        return row_sums.sum() / max(stats.num_tokens, 1)
    if mode == "seq-mean-token-sum":
        return row_sums.sum() / max(stats.num_seqs, 1)
    if mode == "seq-mean-token-mean":
        row_counts = present.sum(dim=1).clamp(min=1).to(values.dtype)
        return (row_sums / row_counts).sum() / max(stats.num_nonempty_seqs, 1)
    return row_sums.sum() / max(stats.num_seqs * stats.max_response_len, 1)


def masked_whiten(values: torch.Tensor, mask: torch.Tensor, shift_mean: bool = True) -> torch.Tensor:
    """(values − μ) / sqrt(σ² + 1e-8) with μ, σ² the mean and *unbiased* variance over masked
    tokens (verl's whitening); with ``shift_mean=False`` μ is added back (only the scale changes).
    Positions where the mask is 0 are returned as 0. Needs at least 2 masked tokens.
    """
    _check_same_shape(values=values, mask=mask)
    present = mask.bool()
    count = int(present.sum())
    if count < 2:
        raise ValueError(f"masked_whiten needs at least 2 masked tokens to estimate a variance, got {count}")
    mean = masked_mean(values, present)
    centered = torch.where(present, values - mean, torch.zeros_like(values))
    variance = centered.square().sum() / (count - 1)
    whitened = centered * torch.rsqrt(variance + 1e-8)
    if not shift_mean:
        whitened = torch.where(present, whitened + mean, whitened)
    return whitened


def ppo_clip_loss(
    log_probs: torch.Tensor,
    old_log_probs: torch.Tensor,
    advantages: torch.Tensor,
    mask: torch.Tensor,
    clip_low: float = 0.2,
    clip_high: float = 0.2,
    clip_ratio_c: float | None = None,
) -> ClipLossTerms:
    """PPO's clipped surrogate, per token.

    ρ = exp(clamp(log π − log π_old, ±20));
    L = max(−A·ρ, −A·clip(ρ, 1 − clip_low, 1 + clip_high));
    dual clip (when ``clip_ratio_c`` = c is given, c > 1): where A < 0, L = min(L, −A·c).

    Gradients flow into ``log_probs`` only (``old_log_probs`` and ``advantages`` are constants of
    the loss; pass them detached).
    """
    _check_same_shape(log_probs=log_probs, old_log_probs=old_log_probs, advantages=advantages, mask=mask)
    if clip_low < 0 or clip_high < 0:
        raise ValueError(f"clip_low and clip_high must be >= 0, got clip_low={clip_low}, clip_high={clip_high}")
    if clip_ratio_c is not None and clip_ratio_c <= 1.0:
        raise ValueError(f"clip_ratio_c (dual clip) must be > 1, got {clip_ratio_c}")
    log_ratio = torch.clamp(log_probs - old_log_probs, -LOG_RATIO_CLAMP, LOG_RATIO_CLAMP)
    ratio = torch.exp(log_ratio)
    unclipped = -advantages * ratio
    clipped_term = -advantages * torch.clamp(ratio, 1.0 - clip_low, 1.0 + clip_high)
    loss = torch.maximum(unclipped, clipped_term)
    clipped = clipped_term > unclipped
    dual_clipped = torch.zeros_like(clipped)
    if clip_ratio_c is not None:
        dual_bound = -advantages * clip_ratio_c
        dual_clipped = (advantages < 0) & (dual_bound < loss)
        loss = torch.where(dual_clipped, dual_bound, loss)
    present = mask.bool()
    zero = torch.zeros_like(loss)
    return ClipLossTerms(
        loss=torch.where(present, loss, zero),
        clipped=(clipped & present).to(loss.dtype),
        dual_clipped=(dual_clipped & present).to(loss.dtype),
        ppo_kl=torch.where(present, -log_ratio, zero),
    )


def kl_estimate(log_probs: torch.Tensor, ref_log_probs: torch.Tensor, estimator: str) -> torch.Tensor:
    """Per-token estimate of KL(π ‖ π_ref) from d = log π − log π_ref (same shape as the inputs).

    - ``k1`` / ``kl``:        d
    - ``abs``:                |d|
    - ``k2`` / ``mse``:       ½·d²
    - ``k3`` / ``low_var_kl``: exp(−d) + d − 1, clamped to [−10, 10]. d is clamped to ±20 first so
      that exp stays finite; this changes nothing the final clamp lets through.
    """
    _check_same_shape(log_probs=log_probs, ref_log_probs=ref_log_probs)
    kind = KL_ESTIMATORS.get(estimator)
    if kind is None:
        raise ValueError(f"unknown KL estimator {estimator!r}; choose one of {sorted(KL_ESTIMATORS)}")
    d = log_probs - ref_log_probs
    if kind == "k1":
        return d
    if kind == "abs":
        return d.abs()
    if kind == "k2":
        return 0.5 * d.square()
    d = torch.clamp(d, -LOG_RATIO_CLAMP, LOG_RATIO_CLAMP)
    return torch.clamp(torch.exp(-d) + d - 1.0, -K3_CLAMP, K3_CLAMP)


def discounted_returns(rewards: torch.Tensor, mask: torch.Tensor, gamma: float = 1.0) -> torch.Tensor:
    """Reward-to-go per token: G_t = m_t · (r_t + γ·G_{t+1}), computed right to left over [B, R].

    Rewards where the mask is 0 are ignored and the sum does not carry across them, so a
    right-padded row's returns cover its own response only (0 on padding). With γ = 1,
    G_t = Σ_{t'≥t} r_t' (ReMax); with token rewards as the score on the last token plus a per-token
    KL penalty, this is REINFORCE++'s return.
    """
    _check_same_shape(rewards=rewards, mask=mask)
    if not 0.0 <= gamma <= 1.0:
        raise ValueError(f"gamma must be in [0, 1], got {gamma}")
    present = mask.bool()
    rewards = torch.where(present, rewards, torch.zeros_like(rewards))
    returns = torch.zeros_like(rewards)
    running = torch.zeros_like(rewards[:, 0])
    for t in range(rewards.shape[1] - 1, -1, -1):
        running = torch.where(present[:, t], rewards[:, t] + gamma * running, torch.zeros_like(running))
        returns[:, t] = running
    return returns


def sequence_log_ratio(log_probs: torch.Tensor, old_log_probs: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """GSPO's per-token log importance ratio [B, R] (0 where the mask is 0):

        log s_i  = Σ_t m_it (log π_it − log π_old,it) / Σ_t m_it     (0 for an empty response)
        log s_it = sg[log s_i] + log π_it − sg[log π_it]

    Its value is the sequence's log ratio log s_i on every token, and its gradient is ∇ log π_it,
    so exp(log s_it) = s_i and, aggregated seq-mean-token-mean, Σ_t ∇ s_it / |o_i| = ∇ s_i: the
    sequence-level ratio of the GSPO paper, written per token so that per-token advantages, masks
    and :func:`ppo_clip_loss` (called with ``old_log_probs`` = 0) apply unchanged.
    """
    _check_same_shape(log_probs=log_probs, old_log_probs=old_log_probs, mask=mask)
    present = mask.bool()
    zero = torch.zeros_like(log_probs)
    diff = torch.where(present, log_probs - old_log_probs, zero).detach()
    seq = diff.sum(dim=1) / present.sum(dim=1).clamp(min=1).to(diff.dtype)
    return torch.where(present, seq[:, None] + log_probs - log_probs.detach(), zero)


def kl_penalized_rewards(
    token_level_scores: torch.Tensor,
    log_probs: torch.Tensor,
    ref_log_probs: torch.Tensor,
    mask: torch.Tensor,
    coef: float,
    estimator: str,
) -> tuple[torch.Tensor, torch.Tensor]:
    """KL as a reward penalty: ``(rewards, kl)`` with kl_t = :func:`kl_estimate` of ``log_probs``
    against ``ref_log_probs`` times m_t, and r_t = (s_t − β·kl_t)·m_t (0 on padding), β = ``coef``."""
    _check_same_shape(token_level_scores=token_level_scores, log_probs=log_probs, ref_log_probs=ref_log_probs,
                      mask=mask)
    on = mask.bool()
    kl = torch.where(on, kl_estimate(log_probs, ref_log_probs, estimator), torch.zeros_like(log_probs))
    rewards = torch.where(on, token_level_scores - coef * kl, torch.zeros_like(token_level_scores))
    return rewards, kl


def rollout_is_weights(
    old_log_probs: torch.Tensor, rollout_log_probs: torch.Tensor, mask: torch.Tensor, level: str, mode: str,
    upper: float, lower: float | None = None,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Rollout correction's importance weights [B, R]: ``(weight, w, changed)``.

    With m the ``mask`` and δ_t = clamp(log π_old,t − log π_rollout,t, ±20) · m_t:

    - ``token``:     log w_t = δ_t
    - ``sequence``:  log w_i = clamp(Σ_t δ_t, ±20) on every token of row i (w_i = Π_t w_t)
    - ``geometric``: log w_i = Σ_t δ_t / Σ_t m_t on every token of row i (0 for an empty row)

    w = exp(log w). ``mode`` ``truncate`` (TIS): weight = min(w, upper), ``changed`` = w > upper;
    ``mask`` (masked IS; IcePop at token level): weight = w · 1[lower ≤ w ≤ upper] (``lower``
    None: 1 / upper), ``changed`` = w outside that range. ``weight``, ``w`` and ``changed`` are 0
    (False) where the mask is 0 (padding, an agent's tool tokens), and carry no gradient.
    """
    _check_same_shape(old_log_probs=old_log_probs, rollout_log_probs=rollout_log_probs, mask=mask)
    if level not in ROLLOUT_IS_LEVELS or mode not in ROLLOUT_IS_MODES:
        raise ValueError(f"rollout_is={level!r}, rollout_is_mode={mode!r}: choose a level of {list(ROLLOUT_IS_LEVELS)} "
                         f"and a mode of {list(ROLLOUT_IS_MODES)}")
    present = mask.bool()
    zero = torch.zeros_like(old_log_probs)
    with torch.no_grad():
        delta = torch.where(present, old_log_probs - rollout_log_probs, zero).clamp(-LOG_RATIO_CLAMP, LOG_RATIO_CLAMP)
        if level == "token":
            log_w = delta
        else:
            row = delta.sum(dim=1, keepdim=True)
            if level == "geometric":
                row = row / present.sum(dim=1, keepdim=True).clamp(min=1).to(row.dtype)
            log_w = row.clamp(-LOG_RATIO_CLAMP, LOG_RATIO_CLAMP).expand_as(delta)
        w = torch.where(present, log_w.exp(), zero)
        if mode == "truncate":
            changed = w > upper
            weight = w.clamp(max=upper)
        else:
            changed = present & ((w < (1.0 / upper if lower is None else lower)) | (w > upper))
            weight = torch.where(changed, zero, w)
    return weight, w, changed
