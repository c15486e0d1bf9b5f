"""What a train engine plugin owes rlloom (:class:`rlloom.protocols.TrainEngine`): :class:`TrainEngineContract`."""

from __future__ import annotations

from typing import ClassVar

import pytest

from rlloom_trainer.contracts.plugin import EngineContract
from rlloom_trainer.contracts.reference import padded, plain_log_probs, plain_model

LOG_PROB_ATOL = 1e-4
"""Float32 on a CPU: the engine's log-probs and a plain forward's agree to rounding."""


def advantage_loss(micro_batch, outputs, stats):
    """−Σ A·log π / (the mini-batch's tokens): raises the log-probs of rows with A > 0."""
    mask = micro_batch["response_mask"].float()
    loss = -(micro_batch["advantages"] * outputs["log_probs"] * mask).sum() / stats.num_tokens
    return loss, {"pg_loss": loss.detach()}


class TrainEngineContract(EngineContract):
    """``train_engine=<name>``, built as the actor on the tiny model on the CPU: ``compute_log_probs`` equals
    log softmax(logits / T) of a plain transformers forward at the response tokens (left-padded prompts,
    right-padded responses), and one ``train_step`` with a loss that pushes some rows up and others down
    returns finite metrics and changes the weights ``named_weights`` gives."""

    kind: ClassVar[str] = "train_engine"
    engine_role: ClassVar[str] = "actor"

    @pytest.fixture(scope="class")
    @classmethod
    def batch(cls, rlloom_tiny_model):
        """Two prompts of different lengths (left-padded) with responses of 5 and 3 tokens (right-padded)."""
        import torch
        from rlloom import Batch
        from transformers import AutoTokenizer

        tokenizer = AutoTokenizer.from_pretrained(rlloom_tiny_model)
        pad = tokenizer.pad_token_id
        def ids(texts):
            return [tokenizer(text, add_special_tokens=False)["input_ids"] for text in texts]

        prompts, prompt_mask = padded(ids(["2+2=", "Say a number:"]), pad, left=True)
        responses, response_mask = padded(ids(["four.", "4!!"]), pad, left=False)
        return Batch({"prompts": prompts, "prompt_mask": prompt_mask, "responses": responses,
                      "response_mask": response_mask,
                      "advantages": torch.tensor([[1.0], [-1.0]]).expand(responses.shape).contiguous()},
                     meta={"temperature": 0.8, "pad_token_id": pad})

    def test_log_probs_equal_a_plain_forward(self, engine, batch, rlloom_tiny_model):
        import torch

        got = engine.compute_log_probs(batch)["log_probs"]
        assert got.shape == batch["responses"].shape
        model = plain_model(rlloom_tiny_model)
        for row in range(len(batch)):
            kept = int(batch["response_mask"][row].sum())
            expected = plain_log_probs(model, batch["prompts"][row][batch["prompt_mask"][row].bool()],
                                       batch["responses"][row, :kept], batch.meta["temperature"])
            assert torch.allclose(got[row, :kept].float(), expected, atol=LOG_PROB_ATOL), (
                row, (got[row, :kept].float() - expected).abs().max())

    def test_a_train_step_changes_the_weights(self, engine, batch):
        import math

        before = {name: tensor.detach().clone() for name, tensor in engine.named_weights()}
        metrics = engine.train_step(batch, advantage_loss)
        assert all(math.isfinite(float(value)) for value in metrics.values()), metrics
        after = dict(engine.named_weights())
        assert set(after) == set(before)
        changed = [name for name, tensor in after.items() if not tensor.detach().equal(before[name])]
        assert changed, "no weight changed in a train step"
