"""``toy_length``: rewards short responses."""

from __future__ import annotations

import torch

from rlloom import Batch, RewardResult

from rlloom_plugin_template.config import ToyLengthRewardConfig


class ToyLengthReward:
    """score = 1 if len(response_text.strip()) <= max_chars else 0."""

    def __init__(self, cfg: ToyLengthRewardConfig) -> None:
        self.config = cfg

    def __call__(self, batch: Batch) -> RewardResult:
        short = [len(text.strip()) <= self.config.max_chars for text in batch["response_text"]]
        scores = torch.tensor(short, dtype=torch.float32)
        return RewardResult(scores=scores, components={"short": scores})
