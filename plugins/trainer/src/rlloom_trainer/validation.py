"""Validation: sampled and greedy accuracy of a model on prompts, reported per data source.

The trainer runs it before training, every ``trainer.test_freq`` steps and after the last;
``rlloom eval`` runs the same on a saved model, so both report the same numbers.
"""

from __future__ import annotations

import dataclasses
from typing import TYPE_CHECKING

import torch

from rlloom_trainer.progress import phase

if TYPE_CHECKING:
    from rlloom.batch import Batch
    from rlloom.config.schema import TrainerConfig
    from rlloom.controller.step import StepContext
    from rlloom.types import SamplingParams


def validation_metrics(batch: Batch, k: int, prefix: str = "val-core") -> dict[str, float]:
    """Per data source: ``acc/mean@k`` (mean score of all samples) and ``acc/best@k`` (mean over
    prompts of the best of the k scores, pass@k for 0/1 rewards). Rows are interleaved by prompt."""
    scores = batch["scores"].float().view(-1, k)
    sources = batch["data_source"][::k]
    metrics: dict[str, float] = {}
    for source in sorted(set(sources)):
        rows = torch.tensor([s == source for s in sources])
        metrics[f"{prefix}/{source}/acc/mean@{k}"] = float(scores[rows].mean())
        if k > 1:
            metrics[f"val-aux/{source}/acc/best@{k}"] = float(scores[rows].max(dim=1).values.mean())
    return metrics


def validate(ctx: StepContext, prompts: Batch, sampling: SamplingParams, cfg: TrainerConfig) -> dict[str, float]:
    """``cfg.val_n`` samples per prompt at ``cfg.val_temperature`` (:func:`validation_metrics`) and,
    with ``cfg.val_greedy``, greedy accuracy (``…/acc/greedy``); ``timing_s/validation`` is the time taken.
    ``sampling`` gives the rest of the sampling settings (the run's)."""
    with ctx.timed("validation"), phase(f"validating {len(prompts)} prompts"):
        sampled_with = dataclasses.replace(sampling, temperature=cfg.val_temperature)
        sampled = ctx.score(ctx.generate(prompts, cfg.val_n, sampled_with, stage="validation_gen"))
        metrics = validation_metrics(sampled, cfg.val_n)
        if cfg.val_greedy:
            greedy_with = dataclasses.replace(sampling, temperature=0.0)
            greedy = ctx.score(ctx.generate(prompts, 1, greedy_with, stage="validation_gen"))
            metrics.update({key.replace("mean@1", "greedy"): value
                            for key, value in validation_metrics(greedy, 1).items()})
    metrics["timing_s/validation"] = ctx.metrics["timing_s/validation"]
    return metrics
