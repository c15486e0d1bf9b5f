"""LoRA end to end (``train_engine.lora``, docs/lora.md): the FSDP actor's merged weights reach the hf rollout
engine under base names at every sync, the reference is the actor with its adapters off, a run with LoRA
(syncing only its adapters into vLLM after the first sync) learns, keeps only adapters in its checkpoints and
exports them in PEFT format or merged (that run's vLLM generating in a process of its own); bad LoRA
settings, and weight syncs the run's engines cannot take, exit 2 naming the key before any weights load."""

from __future__ import annotations

import json
import os

import pytest
import torch
from rlloom import EngineSpec, SamplingParams
from rlloom.cli import main
from rlloom.controller.step import Roles, StepContext
from rlloom.data import PromptRecord
from rlloom_enginekit.lora import LoraConfig, reference_role
from rlloom_enginekit.resharder import InProcessResharder, InProcessResharderConfig
from rlloom_fsdp.config import FSDPConfig
from rlloom_fsdp.engine import FSDPTrainEngine
from rlloom_hf.config import HFRolloutConfig
from rlloom_hf.engine import HFRolloutEngine
from rlloom_trainer.prompts import PromptEncoder
from rlloom_trainer.testing import device_params, metric_rows, train_tiny, training_rows

PROMPTS = ["Q: pick a digit\nA:", "Say hi:", "What comes after 3? Answer:"]
RANK, ALPHA = 8, 32.0


def advantage_loss(micro, outputs, stats):
    """−Σ A·log π / tokens."""
    loss = -(micro["advantages"] * outputs["log_probs"] * micro["response_mask"].float()).sum() / stats.num_tokens
    return loss, {"pg_loss": float(loss.detach())}


def expected_rollout_weights(actor: FSDPTrainEngine) -> dict[str, torch.Tensor]:
    """base + (alpha / r) · B A from the actor's own adapter tensors, under base names."""
    state = {name: tensor.detach().clone() for name, tensor in actor.model.state_dict().items()}
    expected = {}
    for name, tensor in state.items():
        if name.endswith(".base_layer.weight"):
            prefix = name.removesuffix(".base_layer.weight")
            tensor = tensor + ALPHA / RANK * state[f"{prefix}.lora_B.default.weight"] @ state[f"{prefix}.lora_A.default.weight"]
        if ".lora_" not in name:
            expected[name.replace(".base_layer.", ".")] = tensor
    return expected


class NameRecorder:
    """Passes the synced tensors through to the rollout engine, keeping their names."""

    def __init__(self, rollout: HFRolloutEngine) -> None:
        self.rollout, self.names = rollout, []

    def update_weights(self, named_tensors):
        def recorded():
            for name, tensor in named_tensors:
                self.names.append(name)
                yield name, tensor
        self.rollout.update_weights(recorded())


@pytest.mark.parametrize("device", device_params("LoRA's merged sync into a bf16 hf rollout on one GPU"))
def test_every_sync_gives_the_rollout_the_merged_weights_and_its_log_probs_match(tiny_model_path, device):
    actor = FSDPTrainEngine(FSDPConfig(lr=5e-2, micro_batch_size=3, lora=LoraConfig(rank=RANK, alpha=ALPHA)),
                            EngineSpec(tiny_model_path, "actor", 0, 10, device))
    rollout = HFRolloutEngine(HFRolloutConfig(), EngineSpec(tiny_model_path, "rollout", 0, 10, device))
    # CPU: float32 everywhere; CUDA: the rollout holds bf16 (each merged weight rounded once), both engines compute in bf16
    weight_rtol, log_prob_atol = (0.0, 1e-3) if device == "cpu" else (1e-2, 5e-2)
    try:
        prompts = PromptEncoder(rollout.tokenizer, 64).encode([PromptRecord(text, None, "t") for text in PROMPTS])
        resharder, recorder = InProcessResharder(InProcessResharderConfig()), NameRecorder(rollout)
        base_names = set(rollout.model.state_dict())
        previous = {name: tensor.clone() for name, tensor in rollout.model.state_dict().items()}
        for sync in range(2):
            batch = rollout.generate(prompts, SamplingParams(n=2, temperature=1.0, max_new_tokens=8, seed=sync))
            batch["advantages"] = torch.tensor([1.0, -1.0] * 3).unsqueeze(1) * batch["response_mask"].float()
            actor.train_step(batch, advantage_loss)
            recorder.names.clear()
            stats = resharder.sync(actor, recorder)
            assert set(recorder.names) <= base_names and not any(
                part in name for name in recorder.names for part in ("base_layer", "lora_", "_fsdp", "_orig_mod"))
            synced = rollout.model.state_dict()
            for name, tensor in expected_rollout_weights(actor).items():
                torch.testing.assert_close(synced[name].float(), tensor.float(), atol=1e-6, rtol=weight_rtol, msg=name)
            changed = [name for name in previous if not torch.equal(previous[name], synced[name])]
            assert changed and all(name.endswith("_proj.weight") for name in changed), sync
            previous = {name: tensor.clone() for name, tensor in synced.items()}
            assert stats.num_bytes == sum(p.numel() * 4 for p in rollout.model.parameters())  # merged float32: every weight
            check = rollout.generate(prompts, SamplingParams(n=2, temperature=1.0, max_new_tokens=8, seed=10 + sync))
            mask = check["response_mask"].bool()
            gap = (actor.compute_log_probs(check)["log_probs"] - check["rollout_log_probs"]).abs()[mask]
            assert float(gap.max()) < log_prob_atol
        roles = Roles(rollout=rollout, actor=actor, reward_fn=None, resharder=resharder,
                      ref=reference_role(actor.config, actor))
        StepContext(roles, rollout.tokenizer, SamplingParams(), step=1).ref_log_probs(check)
        torch.testing.assert_close(check["ref_log_probs"], actor.compute_ref_log_probs(check)["log_probs"])
        assert (check["ref_log_probs"] - actor.compute_log_probs(check)["log_probs"]).abs().max() > 1e-3
        assert reference_role(FSDPConfig(), actor) is None  # without LoRA the run builds a reference engine
    finally:
        rollout.close()
        actor.close()


@pytest.mark.parametrize("overrides, named", [
    (["train_engine.lora.rank=-4"], "train_engine.lora.rank=-4: must be >= 0"),
    (["train_engine.lora.rank=8", "train_engine.lora.target_modules=[q_proj,attn]"],
     "['attn'] match no linear layer of the model; its linear layers are named ['down_proj', 'gate_proj', 'k_proj'"),
    (["train_engine=megatron", "train_engine.lora.rank=8"], "train_engine=megatron cannot take LoRA: megatron-core"),
    (["train_engine.lora.adapter_path=/nowhere"], "train_engine.lora.adapter_path=/nowhere: needs"),
    (["train_engine.lora.rank=8", "resharder=shared"], "resharder=shared lends the train engine's own parameters"),
    (["resharder.lora_sync=adapter"], "resharder.lora_sync=adapter needs LoRA adapters to send: set train_engine.lora"),
    (["train_engine.lora.rank=8", "resharder.lora_sync=adapter"],
     "resharder.lora_sync=adapter: rollout=hf loads full weights only; or use resharder.lora_sync=merged"),
    (["train_engine.lora.rank=4", "resharder.lora_sync=adapter", "rollout=vllm"],
     "rollout=vllm has LoRA slots of rank <= rollout.max_lora_rank=0, below train_engine.lora.rank=4: set "
     "rollout.max_lora_rank=8"),
    (["train_engine.lora.rank=8", "resharder.lora_sync=adapter", "rollout=vllm", "rollout.max_lora_rank=8",
      "trainer.async_mode=fully_async", "trainer.partial_rollout=true"],
     "trainer.partial_rollout=true swaps the weights inside a generation, and the rollout process loads an adapter"),
    (["resharder.lora_sync=both"], "resharder.lora_sync=both: must be one of merged, adapter"),
])
def test_bad_lora_input_exits_2_naming_the_key(overrides, named, tmp_path, capsys):
    status = main(["train", "preset=tiny", f"model.cache_dir={tmp_path / 'models'}",
                   f"trainer.run_dir={tmp_path / 'run'}", *overrides])
    err = capsys.readouterr().err
    assert status == 2, err
    assert named in err and "Traceback" not in err
    assert not os.path.exists(tmp_path / "run" / "checkpoints")


@pytest.fixture(scope="module")
def lora_run(tmp_path_factory):
    """preset=tiny with LoRA and a KL loss (the reference from the actor), on a wider tiny model: the
    random-init model's logits are small, so adapters on its linear layers move them further when wider. The
    rollout is vLLM taking adapter-only syncs (resharder.lora_sync=adapter) in a process of its own
    (trainer.async_mode=fully_async, which loads each adapter between generations; max_staleness 0 keeps every batch
    on the trainer's weights, so the log-probs compare as in a synchronous run)."""
    run_dir = str(tmp_path_factory.mktemp("lora-run"))
    train_tiny(run_dir, "model.hidden_size=256", "model.intermediate_size=512", "train_engine.lora.rank=8",
               "train_engine.lora.alpha=32", "train_engine.lr=1e-1", "algorithm.use_kl_loss=true",
               "algorithm.kl_loss_coef=0.001", "trainer.save_freq=10", "rollout=vllm", "rollout.max_lora_rank=8",
               "resharder.lora_sync=adapter", "trainer.async_mode=fully_async", "trainer.max_staleness=0",
               cache_dir=tmp_path_factory.mktemp("cache"))
    return run_dir


@pytest.mark.slow
def test_grpo_with_lora_learns_without_a_reference_engine(lora_run):
    train = training_rows(metric_rows(lora_run))
    first = sum(row["critic/score/mean"] for row in train[:3]) / 3
    last = sum(row["critic/score/mean"] for row in train[-3:]) / 3
    assert last > first + 0.05, (first, last)
    for row in train:
        assert row["training/rollout_probs_diff_mean"] < 1e-3  # vLLM with the adapters synced = the actor
        assert row["async/staleness/max"] == 0  # generated in the rollout process, on the weights it trains
        assert row["perf/reference_memory_saved_gb"] > 0  # the actor served the reference
    assert train[-1]["actor/kl_loss"] > 0
    # the first sync sent W0 and the adapters, every later one the adapters alone (5.3 % of W0 at rank 8, hidden 256)
    later = {row["perf/weight_sync_bytes"] for row in train[1:]}
    assert len(later) == 1 and later.pop() < 0.06 * train[0]["perf/weight_sync_bytes"]


@pytest.mark.slow
def test_lora_checkpoint_holds_adapters_and_exports_both_ways(lora_run, tmp_path, capsys):
    import torch.distributed.checkpoint as dcp
    from peft import PeftModel
    from transformers import AutoModelForCausalLM

    checkpoint = os.path.join(lora_run, "checkpoints", "global_step_20")
    saved = dcp.FileSystemReader(os.path.join(checkpoint, "actor")).read_metadata().state_dict_metadata
    assert all(".lora_A." in key or ".lora_B." in key for key in saved if key.startswith("model."))
    assert main(["export", checkpoint, "--out", str(tmp_path / "adapter")]) == 0
    assert sorted(os.listdir(tmp_path / "adapter")) == ["adapter_config.json", "adapter_model.safetensors"]
    assert json.loads((tmp_path / "adapter" / "adapter_config.json").read_text())["r"] == RANK
    assert main(["export", checkpoint, "--merge", "--out", str(tmp_path / "merged")]) == 0
    capsys.readouterr()
    base_path = json.loads((tmp_path / "adapter" / "adapter_config.json").read_text())["base_model_name_or_path"]
    ids = torch.tensor([[ord(c) for c in "Q: pick a digit\nA:"]])
    with torch.no_grad():
        peft_logits = PeftModel.from_pretrained(AutoModelForCausalLM.from_pretrained(base_path),
                                                str(tmp_path / "adapter"))(ids).logits
        merged_logits = AutoModelForCausalLM.from_pretrained(str(tmp_path / "merged"))(ids).logits
        final_logits = AutoModelForCausalLM.from_pretrained(os.path.join(lora_run, "final_model"))(ids).logits
        base_logits = AutoModelForCausalLM.from_pretrained(base_path)(ids).logits
    torch.testing.assert_close(merged_logits, peft_logits, atol=1e-4, rtol=0)
    torch.testing.assert_close(merged_logits, final_logits, atol=1e-5, rtol=0)
    assert (merged_logits - base_logits).abs().max() > 1e-2
