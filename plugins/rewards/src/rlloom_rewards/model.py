"""``reward=model``: a sequence-classification reward model scores each prompt + response.

``reward.path`` is a local Hugging Face folder holding an ``AutoModelForSequenceClassification``
with one label (``num_labels=1``) and its tokenizer. The model is loaded once, when the reward is
built, in the trainer's process (colocated), in ``float32`` on ``reward.device``, and kept in eval
mode.

Per row the text ``prompt_text + response_text`` (``response_text`` alone when
``include_prompt=false``) is tokenized with the reward model's own tokenizer (special tokens added
as that tokenizer does, truncated to ``max_length`` tokens from the left so the response's end is
kept), rows are right-padded and run in micro-batches of ``batch_size``; the score is the model's
single logit (at the last non-padding token, as Hugging Face's sequence-classification heads pool).
No component; a failing forward pass is not a per-sample error and propagates.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # torch and transformers load when a reward model is built, not when the plugin registers
    import torch
    from rlloom import Batch, RewardResult


@dataclass
class ModelRewardConfig:
    """Options of ``reward=model`` (see the module doc)."""

    path: str = ""  # local folder of a num_labels=1 sequence-classification model + tokenizer
    batch_size: int = 16  # rows per reward-model forward
    max_length: int = 1024  # tokens per row, cut from the left (the response's end kept)
    device: str = "cpu"  # where the reward model runs
    include_prompt: bool = True  # score prompt + response (false: the response alone)

    def __post_init__(self) -> None:
        if self.batch_size < 1 or self.max_length < 1:
            raise ValueError(
                f"reward.batch_size={self.batch_size} and reward.max_length={self.max_length} must be >= 1"
            )


class ModelReward:
    """See the module doc."""

    def __init__(self, cfg: ModelRewardConfig) -> None:
        import torch
        from transformers import AutoModelForSequenceClassification, AutoTokenizer

        if not os.path.isfile(os.path.join(cfg.path, "config.json")):
            raise ValueError(f"reward.path={cfg.path!r} is not a local Hugging Face model folder (no config.json)")
        self.config = cfg
        self.tokenizer = AutoTokenizer.from_pretrained(cfg.path)
        self.tokenizer.truncation_side = "left"
        self.tokenizer.padding_side = "right"
        if self.tokenizer.pad_token_id is None:
            self.tokenizer.pad_token = self.tokenizer.eos_token
        self.model = AutoModelForSequenceClassification.from_pretrained(cfg.path, dtype=torch.float32)
        if self.model.config.num_labels != 1:
            raise ValueError(
                f"reward.path={cfg.path!r} holds a model with num_labels={self.model.config.num_labels}; "
                "a reward model needs num_labels=1"
            )
        if self.model.config.pad_token_id is None:
            self.model.config.pad_token_id = self.tokenizer.pad_token_id
        self.model.to(cfg.device).eval()

    def score_texts(self, texts: list[str]) -> torch.Tensor:
        """The reward model's score of every text: float32 [len(texts)]."""
        import torch

        scores = []
        with torch.no_grad():
            for start in range(0, len(texts), self.config.batch_size):
                encoded = self.tokenizer(
                    texts[start : start + self.config.batch_size], padding=True, truncation=True,
                    max_length=self.config.max_length, return_tensors="pt",
                ).to(self.config.device)
                logits = self.model(input_ids=encoded["input_ids"], attention_mask=encoded["attention_mask"]).logits
                scores.append(logits[:, 0].float().cpu())
        return torch.cat(scores) if scores else torch.zeros(0)

    def __call__(self, batch: Batch) -> RewardResult:
        from rlloom import RewardResult

        batch.require("response_text", *(("prompt_text",) if self.config.include_prompt else ()))
        responses = list(batch["response_text"])
        prompts = list(batch["prompt_text"]) if self.config.include_prompt else [""] * len(responses)
        return RewardResult(scores=self.score_texts([p + r for p, r in zip(prompts, responses, strict=True)]))
