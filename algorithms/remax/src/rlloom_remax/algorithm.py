"""The ``ReMax`` algorithm: REINFORCE with the greedy rollout's reward as the baseline."""

from __future__ import annotations

import dataclasses
import torch

from rlloom.batch import Batch
from rlloom.controller.step import StepContext
from rlloom_grpo.algorithm import GRPO
from rlloom_remax.config import ReMaxConfig


class ReMax(GRPO):
    """ReMax: one extra greedy generation per prompt; its score baselines the prompt's samples
    (the estimator ``remax``: :func:`rlloom_remax.advantages.remax_advantages` of
    ``token_level_scores`` against ``reward_baselines`` [N])."""

    cfg: ReMaxConfig
    adv_estimator = "remax"

    def step(self, ctx: StepContext, prompts: Batch) -> dict[str, float]:
        """Greedy rollout of each prompt (stage ``gen_baseline``), scored → ``n`` sampled responses
        per prompt, scored, each given its prompt's greedy score as ``reward_baselines`` → GRPO's
        update (:meth:`rlloom_grpo.GRPO.learn`). Metric ``remax/baseline_score/mean``; the
        ``critic/score/*`` metrics are the sampled responses' (scored last)."""
        greedy = dataclasses.replace(ctx.sampling, temperature=0.0)
        baseline = ctx.score(ctx.generate(prompts, 1, greedy, stage="gen_baseline"))
        baseline_of = dict(zip(baseline["uid"], baseline["scores"].tolist()))
        batch = ctx.score(ctx.generate(prompts, n=self.cfg.n))
        batch["reward_baselines"] = torch.tensor([baseline_of[uid] for uid in batch["uid"]], dtype=torch.float32)
        ctx.metrics["remax/baseline_score/mean"] = float(baseline["scores"].mean())
        self.learn(ctx, batch, len(prompts))
        ctx.sync_weights()
        return ctx.metrics
