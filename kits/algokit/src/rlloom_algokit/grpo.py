"""GRPO's step, ``GRPO`` (what it needs, its loss and its advantages): ``algorithm=grpo`` and its
presets (rlloom-grpo) and DAPO (rlloom-dapo) run it or subclass it."""

from __future__ import annotations

from typing import Any, Optional

import torch

from rlloom.batch import Batch
from rlloom.controller.step import Concurrent, StepContext
from rlloom_algokit.advantages import compute_advantages
from rlloom_algokit.grpo_config import GRPOConfig, GRPOStepConfig
from rlloom_algokit.lookup import get_advantage_estimator
from rlloom_algokit.policy_loss import apply_rollout_correction, make_policy_loss_fn


class GRPO:
    """Group relative policy optimization (Dr.GRPO with ``norm_adv_by_std=False``). No critic;
    a reference model only for the KL loss.

    The advantage estimator and the policy loss are looked up by name among the registered ones
    (:mod:`rlloom_algokit.lookup`): ``cfg.adv_estimator`` (a key of :class:`GRPOConfig`, or fixed by
    a preset's config class, as :class:`rlloom_grpo.config.RLOOConfig`'s ``rloo``) and
    ``cfg.policy_loss``."""

    needs_critic = False

    def __init__(self, cfg: GRPOStepConfig) -> None:
        self.config = cfg
        self.estimator = get_advantage_estimator(cfg.adv_estimator)
        self.loss_fn = make_policy_loss_fn(cfg)

    @property
    def needs_reference(self) -> bool:
        return self.config.use_kl_loss

    def advantage_options(self) -> dict[str, Any]:
        """The estimator's settings from the config: ``norm_by_std`` and ``eps`` when it is a
        :class:`GRPOConfig` (its ``norm_adv_by_std`` and ``epsilon``), else none (the estimator's
        defaults); a subclass whose config has others (REINFORCE++'s ``gamma``) adds them."""
        if not isinstance(self.config, GRPOConfig):
            return {}
        return {"norm_by_std": self.config.norm_adv_by_std, "eps": self.config.epsilon}

    def token_level_rewards(self, batch: Batch) -> Optional[torch.Tensor]:
        """The token-level rewards the estimator gets: ``token_level_scores`` (GRPO's reward has no
        KL penalty)."""
        return batch.get("token_level_scores")

    def compute_advantages(self, batch: Batch) -> torch.Tensor:
        """``advantages`` [N, R] float32 from the estimator (:func:`rlloom_algokit.advantages.compute_advantages`)
        of the batch's ``scores``, :meth:`token_level_rewards`, ``response_mask``, groups of equal
        ``uid`` and ``reward_baselines`` (None where the batch has none), with
        :meth:`advantage_options`."""
        batch.require("uid", "response_mask")
        return compute_advantages(
            self.estimator,
            response_mask=batch["response_mask"],
            scores=batch.get("scores"),
            token_level_rewards=self.token_level_rewards(batch),
            group_ids=batch["uid"],
            baselines=batch.get("reward_baselines"),
            **self.advantage_options(),
        )

    def step(self, ctx: StepContext, prompts: Batch) -> dict[str, float]:
        """One GRPO step: n responses per prompt → rewards, with the log-probs computed at the same
        time → :meth:`update` → weight sync."""
        batch = ctx.generate(prompts, n=self.config.n)
        with ctx.concurrently() as run:
            run.score(batch)
            self.log_probs(run, batch, len(prompts))
        self.update(ctx, batch, len(prompts))
        ctx.sync_weights()
        return ctx.metrics

    def learn(self, ctx: StepContext, batch: Batch, num_prompts: int) -> None:
        """Train on a scored ``batch`` of ``num_prompts`` groups of ``cfg.n`` responses:
        :meth:`log_probs` (their calls run concurrently), then :meth:`update`. Algorithms that build
        their scored batch their own way (DAPO's dynamic sampling, ReMax's greedy baseline) end their
        step with this and the weight sync."""
        with ctx.concurrently() as run:
            self.log_probs(run, batch, num_prompts)
        self.update(ctx, batch, num_prompts)

    def log_probs(self, stages: StepContext | Concurrent, batch: Batch, num_prompts: int) -> None:
        """Behaviour log-probs, and reference log-probs when ``needs_reference``.

        Behaviour log-probs need their own forward pass only when the step takes several optimizer
        steps, ``recompute_old_log_probs`` or rollout correction (``rollout_is``), and never in
        ``bypass_mode`` (:meth:`needs_old_log_probs`); see
        :func:`rlloom_algokit.policy_loss.make_policy_loss_fn`."""
        if self.needs_old_log_probs(batch, num_prompts):
            stages.old_log_probs(batch)
        if self.needs_reference:
            stages.ref_log_probs(batch)

    def needs_old_log_probs(self, batch: Batch, num_prompts: int) -> bool:
        """Whether the step needs a separate behaviour-log-prob pass: not in ``cfg.bypass_mode`` (the
        rollout log-probs are the old policy's); else with several optimizer steps,
        ``cfg.recompute_old_log_probs``, or ``cfg.rollout_is`` (its weights are π_old / π_rollout)."""
        cfg = self.config
        if cfg.bypass_mode:
            return False
        return cfg.recompute_old_log_probs or cfg.rollout_is is not None or not self._one_update(num_prompts)

    def _mini_batch_prompts(self, num_prompts: int) -> int:
        return self.config.ppo_mini_batch_size or num_prompts

    def _one_update(self, num_prompts: int) -> bool:
        return self.config.ppo_epochs == 1 and self._mini_batch_prompts(num_prompts) >= num_prompts

    def update(self, ctx: StepContext, batch: Batch, num_prompts: int) -> None:
        """Advantages (metrics ``critic/advantages/mean|max|min`` over response tokens), the
        rollout-correction weights when on (:func:`rlloom_algokit.policy_loss.apply_rollout_correction`,
        metrics ``rollout_corr/...``), then the clipped policy update(s)."""
        cfg = self.config
        with ctx.timed("adv"):
            advantages = batch["advantages"] = self.compute_advantages(batch)
        mask = batch["response_mask"].bool()
        if mask.any():
            ctx.metrics.update({
                "critic/advantages/mean": float(advantages[mask].mean()),
                "critic/advantages/max": float(advantages[mask].max()),
                "critic/advantages/min": float(advantages[mask].min()),
            })
        ctx.metrics.update(apply_rollout_correction(batch, cfg))
        ctx.update_actor(batch, self.loss_fn, mini_batch_rows=self._mini_batch_prompts(num_prompts) * cfg.n,
                         epochs=cfg.ppo_epochs)
