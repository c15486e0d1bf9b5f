"""The second half of a GRPO-shaped step, for algorithms that build their scored batch their own
way (DAPO's dynamic sampling, ReMax's greedy baseline)."""

from __future__ import annotations

from rlloom.batch import Batch
from rlloom.controller.step import StepContext
from rlloom.losses import masked_mean
from rlloom_grpo.algorithm import GRPO


def learn(algorithm: GRPO, ctx: StepContext, batch: Batch, num_prompts: int) -> None:
    """Train on a scored ``batch`` of ``num_prompts`` groups of ``algorithm.cfg.n`` responses, as
    :meth:`rlloom_grpo.GRPO.step` does after scoring: behaviour log-probs (only when the step takes
    several optimizer steps or ``recompute_old_log_probs``), reference log-probs when
    ``algorithm.needs_reference``, ``algorithm.compute_advantages(batch)`` (metrics
    ``critic/advantages/mean|max|min`` over response tokens), the actor update with
    ``algorithm.loss_fn``, then the weight sync."""
    cfg = algorithm.cfg
    mini_batch_prompts = cfg.ppo_mini_batch_size or num_prompts
    one_update = cfg.ppo_epochs == 1 and mini_batch_prompts >= num_prompts
    if cfg.recompute_old_log_probs or not one_update:
        batch = ctx.old_log_probs(batch)
    if algorithm.needs_reference:
        batch = ctx.ref_log_probs(batch)
    with ctx.timed("adv"):
        advantages = batch["advantages"] = algorithm.compute_advantages(batch)
    mask = batch["response_mask"].bool()
    if mask.any():
        ctx.metrics.update({
            "critic/advantages/mean": float(masked_mean(advantages, mask)),
            "critic/advantages/max": float(advantages[mask].max()),
            "critic/advantages/min": float(advantages[mask].min()),
        })
    ctx.update_actor(batch, algorithm.loss_fn, mini_batch_rows=mini_batch_prompts * cfg.n, epochs=cfg.ppo_epochs)
    ctx.sync_weights()
