"""The ``DAPO`` algorithm: GRPO's advantages and loss, clip-higher, dynamic sampling and overlong
reward shaping."""

from __future__ import annotations

import torch

from rlloom.batch import Batch
from rlloom.controller.step import StepContext
from rlloom_algokit.grpo import GRPO
from rlloom_dapo.config import DAPOConfig
from rlloom_dapo.sampling import filter_values, varied_groups
from rlloom_dapo.shaping import apply_overlong_penalty


class DAPO(GRPO):
    """Decoupled clip and dynamic sampling policy optimization. No critic; a reference model only
    when ``use_kl_loss`` (off by default)."""

    cfg: DAPOConfig

    def step(self, ctx: StepContext, prompts: Batch) -> dict[str, float]:
        """One DAPO step. Each round generates ``n`` responses for its prompts, scores them and
        applies overlong shaping (when enabled); with ``dynamic_sampling`` it keeps the groups
        whose ``filter_groups_metric`` values are not all equal
        (:func:`rlloom_dapo.sampling.filter_values`; correctness by default, as the paper and verl's
        recipes) and, while it has fewer than ``len(prompts)`` of
        them and fewer than ``max_gen_rounds`` rounds, draws ``ctx.more_prompts()`` for another
        round. The kept groups, trimmed to ``len(prompts)``, train as in GRPO.

        Metrics: ``dapo/gen_rounds``, ``dapo/kept_groups`` (groups trained on),
        ``dapo/dropped_groups`` (all-equal groups seen), ``dapo/missing_groups`` (how many short of
        ``len(prompts)`` the batch stayed after the cap; the step skips the update when 0 groups
        are kept), ``dapo/overlong_penalty_mean``; ``critic/score/mean|max|min`` are over every
        response generated this step, before shaping (the policy's reward, not the kept batch's).
        """
        cfg = self.config
        target = len(prompts)
        kept: list[Batch] = []
        num_kept = dropped = rounds = 0
        scores, penalties = [], []
        while True:
            rounds += 1
            batch = ctx.score(ctx.generate(prompts, n=cfg.n))
            unshaped = batch["scores"]
            scores.append(unshaped)
            if cfg.overlong_buffer_enable:
                penalties.append(apply_overlong_penalty(batch, cfg.overlong_buffer_len, cfg.overlong_penalty_factor))
            if not cfg.dynamic_sampling:
                kept, num_kept = [batch], target
                break
            groups, round_dropped = varied_groups(filter_values(batch, cfg.filter_groups_metric, unshaped),
                                                  batch["uid"])
            dropped += round_dropped
            taken = groups[: target - num_kept]
            if taken:
                kept.append(batch.reorder([row for rows in taken for row in rows]))
                num_kept += len(taken)
            if num_kept >= target or rounds >= cfg.max_gen_rounds:
                break
            prompts = ctx.more_prompts()
        all_scores = torch.cat(scores)
        ctx.metrics.update({
            "critic/score/mean": float(all_scores.mean()),
            "critic/score/max": float(all_scores.max()),
            "critic/score/min": float(all_scores.min()),
            "dapo/gen_rounds": float(rounds),
            "dapo/kept_groups": float(num_kept),
            "dapo/dropped_groups": float(dropped),
            "dapo/missing_groups": float(target - num_kept),
        })
        if penalties:
            ctx.metrics["dapo/overlong_penalty_mean"] = float(torch.cat(penalties).mean())
        if num_kept:
            self.learn(ctx, Batch.concat_padded(kept), num_kept)
            ctx.sync_weights()
        return ctx.metrics
