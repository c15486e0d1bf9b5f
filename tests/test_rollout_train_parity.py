"""The hf rollout engine and the FSDP train engine agree on log-probs, before and after a weight sync,
on the CPU (float32: to 1e-3) and on a GPU (bf16 in both engines: to ``CUDA_LOG_PROB_ATOL``)."""

from __future__ import annotations

import pytest
import torch
from rlloom import EngineSpec, SamplingParams
from rlloom.data import PromptRecord
from rlloom_enginekit.resharder import InProcessResharder, InProcessResharderConfig
from rlloom_trainer.prompts import PromptEncoder
from rlloom_algokit.losses import mini_batch_stats
from rlloom_fsdp.config import FSDPConfig
from rlloom_fsdp.engine import FSDPTrainEngine
from rlloom_hf.config import HFRolloutConfig
from rlloom_hf.engine import HFRolloutEngine
from rlloom_trainer.testing import device_params

PROMPTS = ["Q: pick a digit\nA:", "Say hi:", "What comes after 3? Answer:"]
# bf16 rounds each logit to ~3 significant digits, and the two engines round at different places
# (the rollout's LM head runs in bf16, the trainer's in float32 from bf16 hidden states).
LOG_PROB_ATOL = {"cpu": 1e-3, "cuda": 5e-2}


@pytest.fixture(scope="module", params=device_params("bf16 rollout vs bf16 trainer log-probs on one GPU"))
def engines(request, tiny_model_path):
    device = request.param
    actor = FSDPTrainEngine(FSDPConfig(lr=1e-2, micro_batch_size=3),
                            EngineSpec(tiny_model_path, "actor", 0, 10, device))
    ref = FSDPTrainEngine(FSDPConfig(), EngineSpec(tiny_model_path, "ref", 0, 10, device))
    rollout = HFRolloutEngine(HFRolloutConfig(), EngineSpec(tiny_model_path, "rollout", 0, 10, device))
    yield actor, ref, rollout
    for engine in (rollout, ref, actor):
        engine.close()


def prompt_batch(rollout: HFRolloutEngine):
    records = [PromptRecord(text, None, "test") for text in PROMPTS]
    return PromptEncoder(rollout.tokenizer, 64).encode(records)


@pytest.mark.parametrize("temperature", [1.0, 0.7])
def test_rollout_log_probs_match_trainer(engines, temperature):
    actor, _, rollout = engines
    batch = rollout.generate(prompt_batch(rollout), SamplingParams(n=2, temperature=temperature, max_new_tokens=8, seed=3))
    assert batch.meta["temperature"] == temperature
    trainer = actor.compute_log_probs(batch)["log_probs"]
    mask = batch["response_mask"].bool()
    assert mask.sum() > 0
    diff = (trainer - batch["rollout_log_probs"]).abs()[mask]
    assert float(diff.max()) < LOG_PROB_ATOL[actor.device.type]


def advantage_loss(micro, outputs, stats):
    """−Σ A·log π / tokens: push up responses with A > 0."""
    mask = micro["response_mask"].float()
    loss = -(micro["advantages"] * outputs["log_probs"] * mask).sum() / stats.num_tokens
    return loss, {"pg_loss": float(loss.detach())}


def test_weight_sync_makes_rollout_follow_the_trainer(engines):
    actor, ref, rollout = engines
    batch = rollout.generate(prompt_batch(rollout), SamplingParams(n=2, temperature=1.0, max_new_tokens=8, seed=5))
    signs = torch.tensor([1.0, -1.0] * (len(batch) // 2))
    batch["advantages"] = signs.unsqueeze(1) * batch["response_mask"].float()
    assert mini_batch_stats(batch["response_mask"]).num_tokens > 0
    actor.train_step(batch, advantage_loss)

    stats = InProcessResharder(InProcessResharderConfig()).sync(actor, rollout)
    expected_bytes = sum(p.numel() * 4 for p in rollout.model.parameters())  # float32 master weights; tied: once
    assert stats.num_bytes == expected_bytes
    assert stats.num_tensors > 0 and stats.seconds >= 0

    greedy = rollout.generate(prompt_batch(rollout), SamplingParams(n=1, temperature=0.0, max_new_tokens=8))
    mask = greedy["response_mask"].bool()
    new = actor.compute_log_probs(greedy)["log_probs"]
    old = ref.compute_log_probs(greedy)["log_probs"]
    assert float((new - greedy["rollout_log_probs"]).abs()[mask].max()) < LOG_PROB_ATOL[actor.device.type]
    assert float((old - greedy["rollout_log_probs"]).abs()[mask].max()) > 1e-2


def test_step_context_sleeps_the_rollout_while_training_and_wakes_it_to_generate(engines):
    """With sleep_rollout, the train engines' first pass after generating (old_log_probs here; else
    update_actor) puts the real hf engine to sleep (it then refuses to generate), so its KV cache is not
    held through the log-prob passes; the next generate / sync wakes it."""
    from rlloom.controller.step import Roles, StepContext

    actor, _, rollout = engines
    roles = Roles(rollout=rollout, actor=actor, reward_fn=None,
                  resharder=InProcessResharder(InProcessResharderConfig()), sleep_rollout=True)
    ctx = StepContext(roles, rollout.tokenizer, SamplingParams(max_new_tokens=4), step=1)
    batch = ctx.generate(prompt_batch(rollout), n=2)
    assert not roles.rollout_asleep
    ctx.old_log_probs(batch)
    assert roles.rollout_asleep
    ctx.generate(prompt_batch(rollout), n=1)  # woken to generate; update_actor sleeps it again
    batch["advantages"] = torch.zeros(batch["response_mask"].shape)
    ctx.update_actor(batch, advantage_loss, mini_batch_rows=len(batch))
    assert roles.rollout_asleep
    with pytest.raises(RuntimeError, match="asleep"):
        rollout.generate(prompt_batch(rollout), SamplingParams(max_new_tokens=2))
    ctx.sync_weights()
    assert not roles.rollout_asleep
    assert len(ctx.generate(prompt_batch(rollout), n=1)) == len(PROMPTS)


def test_step_context_offloads_train_engines_before_generating(engines, monkeypatch):
    """With offload_train_engines the controller offloads every train engine before each generate;
    the engines bring their state back themselves at their next call (a no-op pair on the CPU)."""
    from rlloom.controller.step import Roles, StepContext

    actor, ref, rollout = engines
    calls = []
    for name, engine in (("actor", actor), ("ref", ref)):
        monkeypatch.setattr(engine, "offload", lambda name=name, original=engine.offload: (calls.append(name), original()))
    roles = Roles(rollout=rollout, actor=actor, ref=ref, reward_fn=None,
                  resharder=InProcessResharder(InProcessResharderConfig()), offload_train_engines=True)
    ctx = StepContext(roles, rollout.tokenizer, SamplingParams(max_new_tokens=4), step=1)
    batch = ctx.generate(prompt_batch(rollout), n=2)
    assert calls == ["actor", "ref"]
    ctx.old_log_probs(batch)  # the actor works again after the offload
    assert batch["old_log_probs"].shape == batch["response_mask"].shape
    ctx.generate(prompt_batch(rollout), n=1)
    assert calls == ["actor", "ref", "actor", "ref"]
