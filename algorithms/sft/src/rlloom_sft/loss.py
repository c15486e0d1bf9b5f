"""The SFT loss: negative log-likelihood of the demonstration tokens."""

from __future__ import annotations

import dataclasses

import torch

from rlloom.batch import Batch
from rlloom.protocols import LossFn
from rlloom.types import MiniBatchStats
from rlloom_algokit.losses import aggregate, mini_batch_stats
from rlloom_sft.config import SFTConfig


def make_sft_loss_fn(cfg: SFTConfig) -> LossFn:
    """A :data:`rlloom.protocols.LossFn`: with NLL_t = −log π(y_t | prompt, y_<t) on each response
    token (``outputs["log_probs"]``) and ``agg`` = :func:`rlloom_algokit.losses.aggregate` in mode
    ``cfg.loss_agg_mode`` over ``response_mask``, normalised by the mini-batch ``stats``:

        loss = agg(NLL)          (token-mean: Σ NLL_t / response tokens in the mini-batch)

    Prompt tokens are never scored (log-probs cover response positions only) and padding is masked
    out, so the loss summed over micro-batches and ranks is the mini-batch's whatever the cut. With
    ``seq-mean-token-sum-norm`` the length it divides by is the constant ``cfg.max_response_length``.

    Metric ``sft_loss`` (a 0-d tensor): agg(NLL) by this micro-batch's own counts (the engine averages it over
    micro-batches; reported as ``actor/sft_loss``).
    """
    mode = cfg.loss_agg_mode

    def counts(stats: MiniBatchStats) -> MiniBatchStats:
        if mode == "seq-mean-token-sum-norm":
            return dataclasses.replace(stats, max_response_len=cfg.max_response_length)
        return stats

    def loss_fn(micro_batch: Batch, outputs: dict[str, torch.Tensor], stats: MiniBatchStats
                ) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
        micro_batch.require("response_mask")
        if "log_probs" not in outputs:
            raise KeyError(f"the SFT loss needs outputs['log_probs']; got outputs {sorted(outputs)}")
        mask = micro_batch["response_mask"]
        nll = -outputs["log_probs"]
        loss = aggregate(nll, mask, mode, counts(stats))
        with torch.no_grad():
            own = aggregate(nll, mask, mode, counts(mini_batch_stats(mask)))
        return loss, {"sft_loss": own}

    return loss_fn
