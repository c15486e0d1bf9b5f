"""``toy_reinforce``: REINFORCE with a batch-mean baseline, as a page-long algorithm plugin.

Advantage A_i = r_i − mean_batch(r), broadcast over response tokens; loss per token −A·log π,
averaged over all response tokens of the mini-batch (token-mean).
"""

from __future__ import annotations

import torch

from rlloom import Batch, MiniBatchStats

from rlloom_plugin_template.config import ToyReinforceConfig


def reinforce_loss(micro: Batch, outputs: dict[str, torch.Tensor], stats: MiniBatchStats):
    """Σ_tokens −A·log π / (response tokens in the mini-batch)."""
    mask = micro["response_mask"].float()
    loss = -(micro["advantages"] * outputs["log_probs"] * mask).sum() / max(stats.num_tokens, 1)
    return loss, {"pg_loss": loss.item()}


class ToyReinforce:
    needs_reference = False
    needs_critic = False

    def __init__(self, cfg: ToyReinforceConfig) -> None:
        self.config = cfg

    def step(self, ctx, prompts: Batch) -> dict[str, float]:
        batch = ctx.score(ctx.generate(prompts, n=self.config.n))
        baseline = batch["scores"].mean()
        batch["advantages"] = (batch["scores"] - baseline).unsqueeze(1) * batch["response_mask"].float()
        ctx.update_actor(batch, reinforce_loss, mini_batch_rows=len(batch))
        ctx.sync_weights()
        return ctx.metrics
