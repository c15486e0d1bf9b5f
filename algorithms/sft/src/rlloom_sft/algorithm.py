"""The ``SFT`` algorithm object: supervised fine-tuning on demonstrations through the train engines."""

from __future__ import annotations

import torch

from rlloom.batch import Batch
from rlloom.controller.step import StepContext
from rlloom.batch import row_tokens
from rlloom_sft.config import SFTConfig
from rlloom_sft.demonstrations import demonstration_batch, demonstration_texts
from rlloom_sft.loss import make_sft_loss_fn


def demonstration_metrics(batch: Batch, truncated: torch.Tensor) -> dict[str, float]:
    """``response_length/mean|max|min`` (demonstration tokens kept, EOS included),
    ``response_length/clip_ratio`` (the fraction cut by ``max_response_length``) and
    ``perf/total_tokens`` (prompt + response tokens trained on)."""
    lengths = batch["response_mask"].sum(dim=1).float()
    return {
        "response_length/mean": float(lengths.mean()),
        "response_length/max": float(lengths.max()),
        "response_length/min": float(lengths.min()),
        "response_length/clip_ratio": float(truncated.float().mean()),
        "perf/total_tokens": float(row_tokens(batch).sum()),
    }


class SFT:
    """Supervised fine-tuning: the NLL of each prompt's demonstration (prompt masked,
    :func:`rlloom_sft.loss.make_sft_loss_fn`). No generation, reward, reference or critic in a step;
    validation still generates, with the weights synced at the end of each step."""

    needs_reference = False
    needs_critic = False

    def __init__(self, cfg: SFTConfig) -> None:
        self.config = cfg
        self.loss_fn = make_sft_loss_fn(cfg)

    def step(self, ctx: StepContext, prompts: Batch) -> dict[str, float]:
        """Demonstrations → responses (:func:`rlloom_sft.demonstrations.demonstration_batch`,
        timed as ``timing_s/sft_batch``) → ``ppo_epochs`` passes in mini-batches of ``ppo_mini_batch_size``
        prompts (``timing_s/update_actor``; ``actor/sft_loss``, ``actor/grad_norm``, ``actor/lr``)
        → weight sync to the rollout engine."""
        cfg = self.config
        with ctx.timed("sft_batch"):
            texts = demonstration_texts(prompts, cfg.response_key)
            batch, truncated = demonstration_batch(prompts, texts, ctx.tokenizer, cfg.max_response_length)
        ctx.metrics.update(demonstration_metrics(batch, truncated))
        ctx.update_actor(batch, self.loss_fn, mini_batch_rows=cfg.ppo_mini_batch_size or len(prompts),
                         epochs=cfg.ppo_epochs)
        ctx.sync_weights()
        return ctx.metrics
