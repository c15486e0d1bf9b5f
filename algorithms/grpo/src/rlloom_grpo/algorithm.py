"""The GRPO family's algorithm objects whose step or reward differs from GRPO's
(:class:`rlloom_algokit.grpo.GRPO`), ``ReMax`` and ``ReinforcePP``. The other members (``grpo``,
``cispo``, ``gspo``, ``rloo``, ``reinforce_pp_baseline``) are ``GRPO`` or ``ReinforcePP`` with
another config (:mod:`rlloom_grpo.config`)."""

from __future__ import annotations

import dataclasses
from typing import Any

import torch

from rlloom.batch import Batch
from rlloom.controller.step import StepContext
from rlloom_algokit.grpo import GRPO
from rlloom_algokit.losses import kl_penalized_rewards
from rlloom_grpo.config import ReinforcePPConfig, ReMaxConfig


class ReMax(GRPO):
    """ReMax (``algorithm=remax``): one extra greedy generation per prompt; its score baselines the
    prompt's samples (the estimator ``remax``, :class:`rlloom_grpo.config.ReMaxConfig`'s:
    :func:`rlloom_grpo.advantages.remax_advantages` of ``token_level_scores`` against
    ``reward_baselines`` [N])."""

    cfg: ReMaxConfig

    def step(self, ctx: StepContext, prompts: Batch) -> dict[str, float]:
        """Greedy rollout of each prompt (stage ``gen_baseline``), scored → ``n`` sampled responses
        per prompt, scored, each given its prompt's greedy score as ``reward_baselines`` → GRPO's
        update (:meth:`rlloom_algokit.grpo.GRPO.learn`). Metric ``remax/baseline_score/mean``; the
        ``critic/score/*`` metrics are the sampled responses' (scored last)."""
        greedy = dataclasses.replace(ctx.sampling, temperature=0.0)
        baseline = ctx.score(ctx.generate(prompts, 1, greedy, stage="gen_baseline"))
        baseline_of = dict(zip(baseline["uid"], baseline["scores"].tolist()))
        batch = ctx.score(ctx.generate(prompts, n=self.config.n))
        batch["reward_baselines"] = torch.tensor([baseline_of[uid] for uid in batch["uid"]], dtype=torch.float32)
        ctx.metrics["remax/baseline_score/mean"] = float(baseline["scores"].mean())
        self.learn(ctx, batch, len(prompts))
        ctx.sync_weights()
        return ctx.metrics


class ReinforcePP(GRPO):
    """REINFORCE++ (``algorithm=reinforce_pp``): whitened token-level returns (the estimator
    ``reinforce_pp``: :func:`rlloom_grpo.advantages.reinforce_pp_advantages` of
    :meth:`token_level_rewards`), no critic; a reference model when ``use_kl_in_reward`` or
    ``use_kl_loss``. With :class:`rlloom_grpo.config.ReinforcePPBaselineConfig` it is
    REINFORCE++-baseline (``algorithm=reinforce_pp_baseline``: group-centred scores, whitened)."""

    cfg: ReinforcePPConfig

    @property
    def needs_reference(self) -> bool:
        return self.config.use_kl_loss or self.config.use_kl_in_reward

    def needs_old_log_probs(self, batch: Batch, num_prompts: int) -> bool:
        """GRPO's rule, and also when the KL penalty in the reward needs behaviour log-probs and the
        rollout engine reported none (vLLM with top-k / top-p)."""
        missing = self.config.use_kl_in_reward and "rollout_log_probs" not in batch
        return missing or super().needs_old_log_probs(batch, num_prompts)

    def token_level_rewards(self, batch: Batch) -> torch.Tensor:
        """Sets and returns ``token_level_rewards``: ``token_level_scores``, minus the KL penalty
        when ``use_kl_in_reward`` (behaviour log-probs: ``old_log_probs`` when the step computed
        them, else the sampler's own ``rollout_log_probs``)."""
        batch.require("token_level_scores", "response_mask")
        rewards = batch["token_level_scores"]
        if self.config.use_kl_in_reward:
            batch.require("ref_log_probs")
            behaviour = batch.get("old_log_probs")
            if behaviour is None:
                batch.require("rollout_log_probs")
                behaviour = batch["rollout_log_probs"]
            rewards, _ = kl_penalized_rewards(rewards, behaviour, batch["ref_log_probs"], batch["response_mask"],
                                           self.config.kl_coef, self.config.kl_penalty)
        batch["token_level_rewards"] = rewards
        return rewards

    def advantage_options(self) -> dict[str, Any]:
        return {"gamma": self.config.gamma}
