"""The ``PPO`` algorithm object: actor + critic, GAE advantages, optional KL penalty in the reward."""

from __future__ import annotations

import torch

from rlloom.batch import Batch
from rlloom.controller.step import StepContext
from rlloom_algokit.gae import gae_advantages
from rlloom_algokit.kl_control import AdaptiveKLController, FixedKLController
from rlloom_algokit.losses import aggregate, kl_penalized_rewards
from rlloom_algokit.policy_loss import apply_rollout_correction, behaviour_log_probs, make_policy_loss_fn
from rlloom_algokit.ppo_config import PPOConfig
from rlloom_algokit.value_loss import explained_variance, make_value_loss_fn


def masked_summary(prefix: str, values: torch.Tensor, mask: torch.Tensor) -> dict[str, float]:
    """``<prefix>/mean|max|min`` of ``values`` over the tokens where ``mask`` is 1 (empty: 0)."""
    picked = values[mask.bool()]
    if picked.numel() == 0:
        return {f"{prefix}/{stat}": 0.0 for stat in ("mean", "max", "min")}
    return {f"{prefix}/mean": float(picked.mean()), f"{prefix}/max": float(picked.max()),
            f"{prefix}/min": float(picked.min())}


class PPO:
    """Proximal policy optimization with a learned critic (verl's ``adv_estimator=gae``).

    Holds the KL controller's state (β) across steps when the KL penalty is in the reward."""

    needs_critic = True

    def __init__(self, cfg: PPOConfig) -> None:
        self.config = cfg
        self.policy_loss_fn = make_policy_loss_fn(cfg)
        self.value_loss_fn = make_value_loss_fn(cfg.cliprange_value, cfg.loss_agg_mode,
                                                loss_scale_factor=cfg.loss_scale_factor)
        self.kl_ctrl = (
            AdaptiveKLController(cfg.kl_coef, cfg.kl_target, cfg.kl_horizon)
            if cfg.kl_ctrl_type == "adaptive"
            else FixedKLController(cfg.kl_coef)
        )

    @property
    def needs_reference(self) -> bool:
        return self.config.use_kl_in_reward or self.config.use_kl_loss

    def state_dict(self) -> dict[str, float]:
        """What a checkpoint keeps across a resume: the KL coefficient β in use."""
        return {"kl_coef": self.kl_ctrl.value}

    def load_state_dict(self, state: dict[str, float]) -> None:
        self.kl_ctrl.value = float(state["kl_coef"])

    def token_level_rewards(self, batch: Batch, metrics: dict[str, float]) -> torch.Tensor:
        """``token_level_scores`` minus β·KL when ``use_kl_in_reward`` (see
        :func:`rlloom_algokit.losses.kl_penalized_rewards` of π_old (the rollout log-probs in
        ``bypass_mode``) against π_ref; β then adapts to the batch KL —
        the mean over responses of each response's token-mean KL — and
        ``actor/kl_coef`` (the β used) and ``actor/reward_kl_penalty`` (the KL) are logged), else the
        scores unchanged."""
        if not self.config.use_kl_in_reward:
            return batch["token_level_scores"]
        beta = self.kl_ctrl.value
        mask = batch["response_mask"]
        rewards, token_kl = kl_penalized_rewards(
            batch["token_level_scores"], behaviour_log_probs(batch, self.config), batch["ref_log_probs"], mask, beta,
            self.config.kl_penalty
        )
        kl = float(aggregate(token_kl, mask, "seq-mean-token-mean"))
        self.kl_ctrl.update(kl, n_steps=len(batch))
        metrics.update({"actor/kl_coef": beta, "actor/reward_kl_penalty": kl})
        return rewards

    def compute_advantages(self, batch: Batch, metrics: dict[str, float]) -> Batch:
        """Adds ``token_level_rewards``, ``advantages`` and ``returns`` (GAE over the rollout
        ``values``) and logs their summaries and ``critic/vf_explained_var`` of those values."""
        mask = batch["response_mask"]
        batch["token_level_rewards"] = self.token_level_rewards(batch, metrics)
        batch["advantages"], batch["returns"] = gae_advantages(
            batch["token_level_rewards"], batch["values"], mask, self.config.gamma, self.config.lam
        )
        metrics["critic/rewards/mean"] = float(batch["token_level_rewards"].sum(dim=1).mean())
        for name in ("advantages", "returns", "values"):
            metrics.update(masked_summary(f"critic/{name}", batch[name], mask))
        metrics["critic/vf_explained_var"] = explained_variance(batch["returns"], batch["values"], mask)
        return batch

    def step(self, ctx: StepContext, prompts: Batch) -> dict[str, float]:
        """One PPO step: n responses per prompt → rewards, behaviour (and reference) log-probs and
        values (their calls run concurrently; no behaviour pass in ``bypass_mode``) → KL penalty → GAE →
        rollout-correction weights when on (:func:`rlloom_algokit.policy_loss.apply_rollout_correction`) →
        critic update → actor update (after ``critic_warmup`` steps) and weight sync."""
        cfg = self.config
        mini_batch_rows = (cfg.ppo_mini_batch_size or len(prompts)) * cfg.n
        batch = ctx.generate(prompts, n=cfg.n)
        with ctx.concurrently() as run:
            run.score(batch)
            if not cfg.bypass_mode:
                run.old_log_probs(batch)
            if self.needs_reference:
                run.ref_log_probs(batch)
            run.values(batch)
        with ctx.timed("adv"):
            batch = self.compute_advantages(batch, ctx.metrics)
        ctx.metrics.update(apply_rollout_correction(batch, cfg))
        ctx.update_critic(batch, self.value_loss_fn, mini_batch_rows, epochs=cfg.ppo_epochs)
        if ctx.step > cfg.critic_warmup:
            ctx.update_actor(batch, self.policy_loss_fn, mini_batch_rows, epochs=cfg.ppo_epochs)
            ctx.sync_weights()
        return ctx.metrics
