"""The fsdp engine with LoRA adapters (``train_engine.lora``) against plain transformers and PEFT.

The merged weights are checked against W0 + (alpha / r) · B A written from the formula over the
adapter tensors the engine trains; the reference (adapters off) against a separately loaded base model.
"""

from __future__ import annotations

import pytest
import torch
import torch.distributed as dist
import torch.distributed.checkpoint as dcp
import torch.multiprocessing as mp
from test_fsdp_engine import (  # noqa: F401 - fixtures are used by name
    EPS,
    LR,
    assert_weights_close,
    make_batch,
    model_dir,
    one_thread,
    pg_loss,
    reference_forward,
    reference_model,
    tied_model_dir,
)

from rlloom import Batch, EngineSpec
from rlloom_enginekit.lora import LoraConfig
from rlloom_fsdp import FSDPConfig, FSDPTrainEngine

RANK, ALPHA = 4, 8.0
SCALING = ALPHA / RANK


def lora_config(**overrides) -> FSDPConfig:
    lora = LoraConfig(**{"rank": RANK, "alpha": ALPHA, **overrides.pop("lora", {})})
    return FSDPConfig(**{"lr": LR, "eps": EPS, "weight_decay": 0.1, "grad_clip": 0.0, "micro_batch_size": 4,
                         "lora": lora, **overrides})


@pytest.fixture
def lora_engines():
    built = []

    def make(model_path: str, **overrides) -> FSDPTrainEngine:
        engine = FSDPTrainEngine(lora_config(**overrides), EngineSpec(model_path, "actor", total_train_steps=10))
        built.append(engine)
        return engine

    yield make
    for engine in built:
        engine.close()


def expected_merge(engine: FSDPTrainEngine) -> dict[str, torch.Tensor]:
    """W0 + (alpha / r) · B A from the engine's own tensors, under the base model's names."""
    state = {name: tensor.detach().clone() for name, tensor in engine.model.state_dict().items()}
    merged = {}
    for name, tensor in state.items():
        if ".lora_" in name:
            continue
        if name.endswith(".base_layer.weight"):
            prefix = name.removesuffix(".base_layer.weight")
            tensor = tensor + SCALING * state[f"{prefix}.lora_B.default.weight"] @ state[f"{prefix}.lora_A.default.weight"]
        merged[name.replace(".base_layer.", ".")] = tensor
    return merged


def train(engine: FSDPTrainEngine, steps: int = 2) -> None:
    for seed in range(steps):
        engine.train_step(make_batch(seed=seed + 1), pg_loss)


def test_only_the_adapters_train_and_the_merged_weights_carry_base_names(model_dir, lora_engines):
    engine = lora_engines(model_dir)
    base = reference_model(model_dir).state_dict()
    trainable = [name for name, parameter in engine.model.named_parameters() if parameter.requires_grad]
    assert trainable and all(".lora_A." in name or ".lora_B." in name for name in trainable)
    # all-linear: the 7 projections of each of the 2 layers, the LM head left out
    assert len(trainable) == 2 * 7 * 2 and not any("lm_head" in name for name in trainable)
    assert_weights_close(dict(engine.named_weights()), base, atol=0)  # B starts at zero: the policy is W0
    train(engine)
    merged = dict(engine.named_weights())
    assert sorted(merged) == sorted(base)  # no base_layer, lora_ or wrapper names
    assert_weights_close(merged, expected_merge(engine), atol=1e-6)
    changed = {name for name in base if not torch.equal(merged[name], base[name])}
    assert changed and all(name.endswith("_proj.weight") for name in changed)
    assert all(".base_layer." in name for name in engine.model.state_dict() if name.endswith("q_proj.base_layer.weight"))


def test_merged_weights_give_the_trainer_log_probs_and_the_reference_is_the_base_model(model_dir, lora_engines):
    engine = lora_engines(model_dir)
    train(engine)
    batch = make_batch(seed=7)
    policy = engine.compute_log_probs(batch)["log_probs"]
    reference = engine.compute_ref_log_probs(batch)["log_probs"]
    rollout = reference_model(model_dir)
    with torch.no_grad():
        base_log_probs, _ = reference_forward(rollout, batch)
        rollout.load_state_dict(dict(engine.named_weights()))
        merged_log_probs, _ = reference_forward(rollout, batch)
    torch.testing.assert_close(reference, base_log_probs, atol=1e-5, rtol=0)
    torch.testing.assert_close(policy, merged_log_probs, atol=1e-5, rtol=0)
    assert (policy - reference).abs().max() > 1e-2  # the adapters moved the policy
    assert engine.train_step(make_batch(), pg_loss)["perf/reference_memory_saved_gb"] == pytest.approx(
        sum(p.numel() * 4 for p in reference_model(model_dir).parameters()) / 1e9)


def test_targets_a_list_and_refuses_names_the_model_lacks(model_dir, lora_engines):
    engine = lora_engines(model_dir, lora={"target_modules": ["q_proj", "v_proj"], "dropout": 0.1})
    assert {name.split(".")[-4] for name, p in engine.model.named_parameters() if p.requires_grad} == {"q_proj", "v_proj"}
    with pytest.raises(ValueError, match=r"\['qkv'\] match no linear layer.*'down_proj'.*'q_proj'"):
        lora_engines(model_dir, lora={"target_modules": ["q_proj", "qkv"]})
    with pytest.raises(ValueError, match=r"\['lm_head'\] match no linear layer"):
        lora_config(lora={"target_modules": ["lm_head"]}).check_model(model_dir, "cpu")
    lora_config(lora={"target_modules": ["self_attn.o_proj"]}).check_model(model_dir, "cpu")


@pytest.mark.parametrize("overrides, message", [
    ({"rank": -1}, "train_engine.lora.rank=-1: must be >= 0"),
    ({"alpha": 0.0}, "train_engine.lora.alpha=0.0: must be > 0"),
    ({"target_modules": []}, "train_engine.lora.target_modules=.*give all-linear or a list"),
    ({"rank": 0, "adapter_path": "/x"}, "adapter_path=/x: needs train_engine.lora.rank > 0"),
])
def test_bad_lora_settings_name_the_key(overrides, message):
    with pytest.raises(ValueError, match=message):
        LoraConfig(**{"rank": RANK, **overrides})


def test_a_checkpoint_holds_the_adapters_only_and_resumes_exactly(tied_model_dir, lora_engines, tmp_path):
    model_dir = tied_model_dir  # torch's state dict keeps a tied LM head under its own name: it must not be saved
    engine = lora_engines(model_dir)
    train(engine)
    engine.save(str(tmp_path / "ckpt"))
    saved = dcp.FileSystemReader(str(tmp_path / "ckpt")).read_metadata().state_dict_metadata
    model_keys = [key for key in saved if key.startswith("model.")]
    assert model_keys and all(".lora_A." in key or ".lora_B." in key for key in model_keys)
    assert any(key.startswith("optimizer.state.") for key in saved)
    engine.train_step(make_batch(seed=9), pg_loss)
    resumed = lora_engines(model_dir)
    resumed.load(str(tmp_path / "ckpt"))
    resumed.train_step(make_batch(seed=9), pg_loss)
    assert_weights_close(dict(resumed.named_weights()), dict(engine.named_weights()), atol=0)


def test_the_exported_adapter_loads_with_peft_and_starts_a_new_run(model_dir, lora_engines, tmp_path):
    from peft import PeftModel

    engine = lora_engines(model_dir)
    train(engine)
    folder = engine.save_adapter(str(tmp_path / "adapter"), model_dir)
    batch = make_batch(seed=5)
    peft_model = PeftModel.from_pretrained(reference_model(model_dir), folder)
    with torch.no_grad():
        peft_log_probs, _ = reference_forward(peft_model, batch)
    torch.testing.assert_close(peft_log_probs, engine.compute_log_probs(batch)["log_probs"], atol=1e-5, rtol=0)
    started = lora_engines(model_dir, lora={"adapter_path": folder})
    assert_weights_close(dict(started.named_weights()), dict(engine.named_weights()), atol=0)
    with pytest.raises(ValueError, match="adapter of rank 4; train_engine.lora.rank=8"):
        lora_engines(model_dir, lora={"adapter_path": folder, "rank": 8})


def test_lora_cannot_lend_its_parameters_and_a_plain_engine_serves_no_reference(model_dir, lora_engines, tied_model_dir):
    with pytest.raises(ValueError, match="resharder=in_process"):
        next(lora_engines(model_dir).live_weights())
    plain = FSDPTrainEngine(FSDPConfig(), EngineSpec(model_dir, "actor", total_train_steps=10))
    try:
        with pytest.raises(RuntimeError, match="only an actor with LoRA"):
            plain.compute_ref_log_probs(make_batch())
    finally:
        plain.close()
    tied = lora_engines(tied_model_dir)  # tied embeddings: lm_head is not adapted and not yielded
    train(tied)
    assert "lm_head.weight" not in dict(tied.named_weights())


# ---------------------------------------------------------------------------------- world size 2
def _world_size_2_worker(rank: int, store_path: str, model_dir: str, batch: Batch, out_dir: str) -> None:
    torch.set_num_threads(1)
    dist.init_process_group("gloo", init_method=f"file://{store_path}", rank=rank, world_size=2)
    engine = FSDPTrainEngine(lora_config(micro_batch_size=2), EngineSpec(model_dir, "actor", total_train_steps=10))
    local = batch.chunk(2)[rank]
    engine.train_step(local, pg_loss)
    engine.train_step(local, pg_loss)
    result = {"policy": engine.compute_log_probs(local)["log_probs"],
              "reference": engine.compute_ref_log_probs(local)["log_probs"],
              "weights": dict(engine.named_weights())}
    engine.close()
    dist.destroy_process_group()
    torch.save(result, f"{out_dir}/rank{rank}.pt")


@pytest.mark.timeout(300)  # a collective out of step between the ranks would hang
def test_sharded_lora_merges_under_base_names_and_serves_the_base_reference(model_dir, tmp_path):
    """FSDP2 over 2 ranks (the model sharded, adapters and frozen weights alike): the merged weights carry the
    base names and give the sharded policy's log-probs; the reference equals the base model."""
    batch = make_batch(rows=6)
    mp.start_processes(_world_size_2_worker, args=(str(tmp_path / "store"), model_dir, batch, str(tmp_path)),
                       nprocs=2, join=True, start_method="spawn")
    ranks = [torch.load(tmp_path / f"rank{rank}.pt") for rank in range(2)]
    base = reference_model(model_dir)
    with torch.no_grad():
        base_log_probs, _ = reference_forward(base, batch)
    assert sorted(ranks[0]["weights"]) == sorted(base.state_dict())
    assert_weights_close(ranks[0]["weights"], ranks[1]["weights"], atol=0)
    reference = torch.cat([result["reference"] for result in ranks])
    torch.testing.assert_close(reference, base_log_probs, atol=1e-5, rtol=0)
    base.load_state_dict(ranks[0]["weights"])
    with torch.no_grad():
        merged_log_probs, _ = reference_forward(base, batch)
    policy = torch.cat([result["policy"] for result in ranks])
    torch.testing.assert_close(policy, merged_log_probs, atol=1e-5, rtol=0)
    assert (merged_log_probs - base_log_probs).abs().max() > 0.1  # it trained
