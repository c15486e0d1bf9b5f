"""The ``SafeRLHF`` algorithm object: PPO-Lagrangian with a reward critic and a cost critic."""

from __future__ import annotations

from typing import Any

import torch

from rlloom.batch import Batch
from rlloom.controller.step import StepContext
from rlloom_algokit.gae import gae_advantages
from rlloom_algokit.policy_loss import apply_rollout_correction
from rlloom_algokit.ppo import PPO, masked_summary
from rlloom_algokit.value_loss import explained_variance, make_value_loss_fn
from rlloom_safe_rlhf.config import SafeRLHFConfig
from rlloom_safe_rlhf.lagrange import LagrangeMultiplier


def lagrangian_advantages(reward_advantages: torch.Tensor, cost_advantages: torch.Tensor,
                          multiplier: float) -> torch.Tensor:
    """Safe-RLHF's actor advantage (A_r − λ·A_c) / (1 + λ): the Lagrangian's, rescaled so that its
    size stays that of one advantage whatever λ is."""
    return (reward_advantages - multiplier * cost_advantages) / (1.0 + multiplier)


class SafeRLHF(PPO):
    """PPO whose actor maximises reward − λ·cost (λ learned, :class:`~rlloom_safe_rlhf.lagrange.LagrangeMultiplier`),
    with a critic for the reward and one for the cost, each trained on its own GAE returns.

    Checkpoints keep λ, the cost window and the KL coefficient."""

    needs_critic = True

    def __init__(self, cfg: SafeRLHFConfig) -> None:
        super().__init__(cfg)
        self.config: SafeRLHFConfig = cfg
        self.cost_value_loss_fn = make_value_loss_fn(
            cfg.cliprange_value, cfg.loss_agg_mode, values_key="cost_values", returns_key="cost_returns",
            loss_scale_factor=cfg.loss_scale_factor)
        self.multiplier = LagrangeMultiplier(
            cfg.lambda_init, cfg.lambda_lr, cfg.cost_limit, cfg.episode_cost_window, cfg.lambda_max
        )

    def state_dict(self) -> dict[str, Any]:
        return {**super().state_dict(), "lagrange": self.multiplier.state_dict()}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        super().load_state_dict(state)
        self.multiplier.load_state_dict(state["lagrange"])

    def token_level_rewards_and_costs(self, batch: Batch, metrics: dict[str, float]) -> tuple[torch.Tensor,
                                                                                             torch.Tensor]:
        """r_t = s_t − β·kl_t and c_t = cost_t + β·kl_t (the KL penalty taken from the reward is added
        to the cost, as Safe-RLHF does; none without ``use_kl_in_reward``), each clipped to
        ±``score_clip``."""
        rewards = self.token_level_rewards(batch, metrics)
        kl_penalty = batch["token_level_scores"] - rewards  # β·kl_t per token, 0 on padding
        costs = batch["token_level_costs"] + kl_penalty
        if self.config.score_clip is not None:
            rewards, costs = (x.clamp(-self.config.score_clip, self.config.score_clip) for x in (rewards, costs))
        return rewards, costs

    def compute_advantages(self, batch: Batch, metrics: dict[str, float]) -> Batch:
        """GAE of the rewards over ``values`` and of the costs over ``cost_values`` (not whitened, as
        in Safe-RLHF: λ trades reward units against cost units), then the actor's
        ``advantages`` = :func:`lagrangian_advantages` with the current λ. Adds ``token_level_rewards``,
        ``returns``, ``cost_advantages`` and ``cost_returns``."""
        cfg, mask = self.config, batch["response_mask"]
        rewards, costs = self.token_level_rewards_and_costs(batch, metrics)
        batch["token_level_rewards"] = rewards
        reward_advantages, batch["returns"] = gae_advantages(
            rewards, batch["values"], mask, cfg.gamma, cfg.lam, whiten=False
        )
        batch["cost_advantages"], batch["cost_returns"] = gae_advantages(
            costs, batch["cost_values"], mask, cfg.gamma, cfg.lam, whiten=False
        )
        multiplier = self.multiplier.value
        batch["advantages"] = lagrangian_advantages(reward_advantages, batch["cost_advantages"], multiplier)
        metrics["safe/lambda"] = multiplier
        metrics["critic/rewards/mean"] = float(rewards.sum(dim=1).mean())
        metrics["safe/costs_shaped/mean"] = float(costs.sum(dim=1).mean())
        for name in ("advantages", "returns", "values", "cost_advantages", "cost_returns", "cost_values"):
            section = "safe" if name.startswith("cost") else "critic"
            metrics.update(masked_summary(f"{section}/{name}", batch[name], mask))
        metrics["critic/vf_explained_var"] = explained_variance(batch["returns"], batch["values"], mask)
        metrics["safe/cost_vf_explained_var"] = explained_variance(batch["cost_returns"], batch["cost_values"], mask)
        return batch

    def update_multiplier(self, step: int, costs: torch.Tensor, metrics: dict[str, float]) -> None:
        """Add this step's costs to J_c's window and, after ``lambda_update_delay_steps`` steps, take
        λ's ascent step. Logs ``safe/episode_cost`` (J_c) and ``safe/cost_violation`` (J_c − d)."""
        self.multiplier.observe(costs.tolist())
        if step > self.config.lambda_update_delay_steps:
            self.multiplier.update()
        metrics["safe/episode_cost"] = self.multiplier.episode_cost()
        metrics["safe/cost_violation"] = self.multiplier.episode_cost() - self.config.cost_limit

    def step(self, ctx: StepContext, prompts: Batch) -> dict[str, float]:
        """One Safe-RLHF step: n responses per prompt → reward, cost, behaviour (and reference)
        log-probs (none in ``bypass_mode``) and both critics' values (submitted together) → λ's
        update → KL-shaped rewards and costs → GAE for each → rollout-correction weights when on →
        both critics' updates → the actor's update on the Lagrangian advantages (after
        ``critic_warmup`` steps) and weight sync."""
        cfg = self.config
        mini_batch_rows = (cfg.ppo_mini_batch_size or len(prompts)) * cfg.n
        batch = ctx.generate(prompts, n=cfg.n)
        with ctx.concurrently() as run:
            run.score(batch)
            run.score(batch, role="cost", into="costs")
            if not cfg.bypass_mode:
                run.old_log_probs(batch)
            if self.needs_reference:
                run.ref_log_probs(batch)
            run.values(batch)
            run.values(batch, role="cost_critic", into="cost_values")
        with ctx.timed("adv"):
            self.update_multiplier(ctx.step, batch["costs"], ctx.metrics)
            batch = self.compute_advantages(batch, ctx.metrics)
        ctx.metrics.update(apply_rollout_correction(batch, cfg))
        ctx.update_critic(batch, self.value_loss_fn, mini_batch_rows, epochs=cfg.ppo_epochs)
        ctx.update("cost_critic", batch, self.cost_value_loss_fn, mini_batch_rows, epochs=cfg.ppo_epochs)
        if ctx.step > cfg.critic_warmup:
            ctx.update_actor(batch, self.policy_loss_fn, mini_batch_rows, epochs=cfg.ppo_epochs)
            ctx.sync_weights()
        return ctx.metrics
