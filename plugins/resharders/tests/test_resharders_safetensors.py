"""``resharder=safetensors``: sharded files round-trip, and a sync into the hf rollout engine
(the ``update_weights`` fallback) makes it follow a trained FSDP actor."""

from __future__ import annotations

import os

import pytest
import torch
from rlloom import EngineSpec, SamplingParams
from rlloom.data import PromptEncoder, PromptRecord
from rlloom.plugins.registry import Registry
from rlloom_fsdp.config import FSDPConfig
from rlloom_fsdp.engine import FSDPTrainEngine
from rlloom_hf import HFRolloutConfig, HFRolloutEngine

from rlloom_resharders import (
    SafetensorsResharder,
    SafetensorsResharderConfig,
    read_safetensors_dir,
    write_safetensors_dir,
)


@pytest.fixture(scope="module")
def tiny_model_path(tmp_path_factory) -> str:
    from rlloom_models.config import TinyModelConfig
    from rlloom_models.tiny import tiny_model_path as build_tiny

    return build_tiny(TinyModelConfig(cache_dir=str(tmp_path_factory.mktemp("resharders-models"))))


def test_shards_round_trip(tmp_path):
    tensors = [(f"w{i}", torch.randn(10, 10)) for i in range(5)]  # 400 bytes each
    (tmp_path / "stale.safetensors").write_bytes(b"old")
    count, size = write_safetensors_dir(iter(tensors), str(tmp_path), max_shard_bytes=1000)
    assert (count, size) == (5, 2000)
    # 400 + 400 fit in 1000, a third would not: shards of 2, 2, 1
    assert sorted(os.listdir(tmp_path)) == [f"model-0000{i}.safetensors" for i in (1, 2, 3)]
    back = list(read_safetensors_dir(str(tmp_path)))
    assert [name for name, _ in back] == [name for name, _ in tensors]
    assert all(torch.equal(a, b) for (_, a), (_, b) in zip(back, tensors))


def test_duplicate_names_and_empty_directories_are_refused(tmp_path):
    with pytest.raises(ValueError, match="'w' appears twice"):
        write_safetensors_dir([("w", torch.zeros(1)), ("w", torch.zeros(1))], str(tmp_path), 100)
    empty = tmp_path / "empty"
    empty.mkdir()
    with pytest.raises(FileNotFoundError, match="no \\*.safetensors"):
        list(read_safetensors_dir(str(empty)))


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
