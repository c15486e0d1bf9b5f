"""``resharder=shared``: the hf rollout engine generates with the FSDP actor's own parameters — one copy
of the weights in memory, every optimizer step visible to the rollout — and matches a rollout engine
kept in sync by copying (``resharder=in_process``)."""

from __future__ import annotations

import pytest
import torch
from rlloom import EngineSpec, SamplingParams
from rlloom.data import PromptRecord
from rlloom_enginekit.resharder import InProcessResharder, InProcessResharderConfig
from rlloom_trainer.prompts import PromptEncoder
from rlloom.plugins.registry import Registry
from rlloom_fsdp.config import FSDPConfig
from rlloom_fsdp.engine import FSDPTrainEngine
from rlloom_hf import HFRolloutConfig, HFRolloutEngine
from rlloom_resharders.config import SharedResharderConfig
from rlloom_resharders.shared import SharedResharder


@pytest.fixture(scope="module")
def tiny_model_path(tmp_path_factory) -> str:
    from rlloom_models.config import TinyModelConfig
    from rlloom_models.tiny import tiny_model_path as build_tiny

    return build_tiny(TinyModelConfig(cache_dir=str(tmp_path_factory.mktemp("shared-models"))))


def advantage_loss(micro, outputs, stats):
    mask = micro["response_mask"].float()
    loss = -(micro["advantages"] * outputs["log_probs"] * mask).sum() / stats.num_tokens
    return loss, {"pg_loss": float(loss.detach())}


def storages(*modules: torch.nn.Module) -> int:
    """Bytes of the distinct parameter storages of ``modules`` together."""
    seen = {}
    for module in modules:
        for tensor in module.state_dict(keep_vars=True).values():
            seen[tensor.untyped_storage().data_ptr()] = tensor.untyped_storage().nbytes()
    return sum(seen.values())


def test_registered_through_the_entry_point():
    component = Registry().get("resharder", "shared")
    assert component.distribution == "rlloom-resharders" and component.config is SharedResharderConfig


def test_the_rollout_generates_with_the_trainers_weights_and_one_copy_is_kept(tiny_model_path):
    torch.set_num_threads(1)
    actor = FSDPTrainEngine(FSDPConfig(lr=1e-2, micro_batch_size=4), EngineSpec(tiny_model_path, "actor", 0, 10))
    shared = HFRolloutEngine(HFRolloutConfig(), EngineSpec(tiny_model_path, "rollout", 0))
    copied = HFRolloutEngine(HFRolloutConfig(), EngineSpec(tiny_model_path, "rollout", 0))
    one_model = storages(actor.model)
    assert storages(actor.model, shared.model) == 2 * one_model

    resharder = SharedResharder(SharedResharderConfig())
    stats = resharder.sync(actor, shared)
    assert storages(actor.model, shared.model) == one_model  # the rollout's own copy is gone
    assert resharder.freed_bytes == one_model and stats.num_bytes == 0

    prompts = PromptEncoder(shared.tokenizer, 64).encode([PromptRecord(t, None, "t") for t in ("Hi:", "A digit:")])
    batch = shared.generate(prompts, SamplingParams(n=2, max_new_tokens=6, seed=0))
    batch["advantages"] = torch.tensor([1.0, -1.0, 1.0, -1.0]).unsqueeze(1) * batch["response_mask"].float()
    actor.train_step(batch, advantage_loss)
    assert resharder.sync(actor, shared).num_tensors > 0 and resharder.freed_bytes == one_model  # nothing new
    InProcessResharder(InProcessResharderConfig()).sync(actor, copied)

    sampling = SamplingParams(n=2, max_new_tokens=6, seed=3)
    through_shared, through_copy = shared.generate(prompts, sampling), copied.generate(prompts, sampling)
    assert torch.equal(through_shared["responses"], through_copy["responses"])
    torch.testing.assert_close(through_shared["rollout_log_probs"], through_copy["rollout_log_probs"], atol=0, rtol=0)
    trainer_view = actor.compute_log_probs(through_shared)["log_probs"]
    mask = through_shared["response_mask"].bool()
    assert float((trainer_view - through_shared["rollout_log_probs"]).abs()[mask].max()) < 1e-4
    for engine in (actor, shared, copied):
        engine.close()


def test_a_dtype_mismatch_is_refused_naming_the_setting(tiny_model_path):
    actor = FSDPTrainEngine(FSDPConfig(micro_batch_size=4), EngineSpec(tiny_model_path, "actor", 0, 10))
    rollout = HFRolloutEngine(HFRolloutConfig(dtype="bfloat16"), EngineSpec(tiny_model_path, "rollout", 0))
    with pytest.raises(ValueError, match="rollout.dtype"):
        SharedResharder(SharedResharderConfig()).sync(actor, rollout)
    actor.close()
    rollout.close()


@pytest.mark.slow
def test_a_tiny_run_with_shared_weights_logs_what_a_copying_sync_logs(tmp_path):
    """``resharder=shared`` is a config change: the same seed gives the same rollouts, losses and rewards."""
    from rlloom_trainer.testing import comparable_rows, train_tiny

    steps = ["trainer.total_steps=3", "trainer.test_freq=3"]
    copied = train_tiny(tmp_path / "copied", *steps, cache_dir=tmp_path / "models")
    shared = train_tiny(tmp_path / "shared", *steps, "resharder=shared", cache_dir=tmp_path / "models")
    assert len(copied) == 4 and comparable_rows(shared) == comparable_rows(copied)
