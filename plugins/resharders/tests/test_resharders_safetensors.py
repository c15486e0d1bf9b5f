"""``resharder=safetensors``: a sync into the hf rollout engine (the ``update_weights`` fallback)
makes it follow a trained FSDP actor (the files themselves: rlloom-enginekit's
``tests/test_safetensors_dir.py``)."""

from __future__ import annotations

import pytest
import torch
from rlloom import EngineSpec, SamplingParams
from rlloom.data import PromptRecord
from rlloom_trainer.prompts import PromptEncoder
from rlloom.plugins.registry import Registry
from rlloom_fsdp.config import FSDPConfig
from rlloom_fsdp.engine import FSDPTrainEngine
from rlloom_hf import HFRolloutConfig, HFRolloutEngine

from rlloom_enginekit.safetensors_dir import read_safetensors_dir

from rlloom_resharders import SafetensorsResharder, SafetensorsResharderConfig


@pytest.fixture(scope="module")
def tiny_model_path(tmp_path_factory) -> str:
    from rlloom_models.config import TinyModelConfig
    from rlloom_models.tiny import tiny_model_path as build_tiny

    return build_tiny(TinyModelConfig(cache_dir=str(tmp_path_factory.mktemp("resharders-models"))))


def test_registered_through_the_entry_point():
    component = Registry().get("resharder", "safetensors")
    assert component.distribution == "rlloom-resharders"
    assert component.config is SafetensorsResharderConfig
    assert isinstance(component.factory(SafetensorsResharderConfig()), SafetensorsResharder)


def advantage_loss(micro, outputs, stats):
    mask = micro["response_mask"].float()
    loss = -(micro["advantages"] * outputs["log_probs"] * mask).sum() / stats.num_tokens
    return loss, {"pg_loss": float(loss.detach())}


def test_sync_into_the_hf_engine_follows_the_trainer(tiny_model_path, tmp_path):
    torch.set_num_threads(1)
    actor = FSDPTrainEngine(FSDPConfig(lr=1e-2, micro_batch_size=4), EngineSpec(tiny_model_path, "actor", 0, 10))
    rollout = HFRolloutEngine(HFRolloutConfig(), EngineSpec(tiny_model_path, "rollout", 0))
    prompts = PromptEncoder(rollout.tokenizer, 64).encode([PromptRecord(t, None, "t") for t in ("Hi:", "A digit:")])
    batch = rollout.generate(prompts, SamplingParams(n=2, max_new_tokens=6, seed=0))
    batch["advantages"] = torch.tensor([1.0, -1.0, 1.0, -1.0]).unsqueeze(1) * batch["response_mask"].float()
    actor.train_step(batch, advantage_loss)
    before = actor.compute_log_probs(batch)["log_probs"]
    assert float((before - batch["rollout_log_probs"]).abs()[batch["response_mask"].bool()].max()) > 1e-2

    directory = tmp_path / "weights"
    stats = SafetensorsResharder(SafetensorsResharderConfig(directory=str(directory), max_shard_mb=1)).sync(
        actor, rollout)
    expected_bytes = sum(p.numel() * p.element_size() for p in rollout.model.parameters())  # tied: once
    assert stats.num_bytes == expected_bytes and stats.seconds > 0
    written = dict(read_safetensors_dir(str(directory)))  # the files stay in a given directory
    assert all(torch.equal(written[name], tensor) for name, tensor in actor.named_weights())

    greedy = rollout.generate(prompts, SamplingParams(temperature=0.0, max_new_tokens=6))
    mask = greedy["response_mask"].bool()
    new = actor.compute_log_probs(greedy)["log_probs"]
    assert float((new - greedy["rollout_log_probs"]).abs()[mask].max()) < 1e-4
    actor.close()
    rollout.close()
