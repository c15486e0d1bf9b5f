"""Ulysses sequence parallelism (``train_engine.sequence_parallel_size``) against SP = 1: two real
processes (gloo) share every micro-batch by its tokens, and their log-probs, entropy, loss,
gradients and updated weights equal those of one process; the checks that name the key."""

from __future__ import annotations

import dataclasses
import json

import pytest
import torch
import torch.distributed as dist
import torch.multiprocessing as mp
from transformers import Qwen2Config, Qwen2ForCausalLM

from rlloom import Batch, EngineSpec
from rlloom_enginekit.dispatch import DataParallelSplit, TokenBalancedSplit
from rlloom_fsdp import FSDPConfig, FSDPTrainEngine
from rlloom_fsdp.attention import VARLEN
from rlloom_fsdp.config import check_sequence_parallel
from rlloom_fsdp.scoring import model_input, split_sequence
from rlloom_fsdp.sequence_parallel import SequenceGroups
from test_fsdp_engine import (  # the shared fixtures and helpers
    EPS,
    LR,
    assert_weights_close,
    engines,  # noqa: F401 - pytest fixture
    make_batch,
    model_dir,  # noqa: F401 - pytest fixture
    one_thread,  # noqa: F401 - pytest fixture
    pg_loss,
    tiny_qwen2,
)

TOLERANCE = 1e-5
CASES = [  # (sequence_layout, the model's attention or train_engine.attention=varlen, gradient_checkpointing)
    ("packed", "sdpa", False),
    ("shared_prompt", "sdpa", False),
    ("shared_prompt", "eager", True),
    ("packed", "varlen", False),
    ("shared_prompt", "varlen", True),
]
DENSE = {"sdpa": "sdpa", "eager": "eager", "varlen": "sdpa"}
"""The attention of each case's SP = 1 reference: the dense mask (varlen is compared with it)."""


def grouped_batch() -> Batch:
    """:func:`test_fsdp_engine.make_batch` with rows 0-2 and 3-4 sharing a prompt (their responses
    follow one prompt in ``shared_prompt``); 6 rows, so each of two ranks gets 3."""
    batch = make_batch(rows=6, prompt_len=6, response_len=9, seed=3)
    for name in ("prompts", "prompt_mask"):
        batch[name] = batch[name][torch.tensor([0, 0, 0, 3, 3, 5])]
    return batch


def settings(layout: str, checkpointing: bool, sp: int, attention: str = "sdpa") -> FSDPConfig:
    """The engine config of a case; ``attention``: the model's (sdpa, eager) or ``varlen``."""
    return FSDPConfig(lr=LR, weight_decay=0.1, eps=EPS, grad_clip=1.0, micro_batch_size=4, sequence_layout=layout,
                      gradient_checkpointing=checkpointing, sequence_parallel_size=sp,
                      attention="varlen" if attention == "varlen" else "sdpa")


def record_gradients(engine: FSDPTrainEngine) -> dict[str, torch.Tensor]:
    """Filled with every parameter's whole gradient when the next train step reaches its optimizer
    step (the engine's own ``optimizer_step`` runs right after)."""
    gradients: dict[str, torch.Tensor] = {}
    step = engine.optimizer_step

    def recording(lr: float) -> float:
        for name, parameter in engine.model.named_parameters():
            grad = parameter.grad
            gradients[name] = (grad.full_tensor() if hasattr(grad, "full_tensor") else grad).detach().clone()
        return step(lr)

    engine.optimizer_step = recording
    return gradients


def record_widths(engine: FSDPTrainEngine) -> list[int]:
    """Filled with the slots per pack of every base-transformer forward the engine makes."""
    widths: list[int] = []
    base = engine.model.base_model
    forward = base.forward

    def recording_forward(*args, **kwargs):
        widths.append(kwargs["input_ids"].shape[1])
        return forward(*args, **kwargs)

    base.forward = recording_forward
    return widths


def run_case(engine: FSDPTrainEngine, batch: Batch) -> dict:
    """Log-probs and entropy, then one train step: its metrics, gradients and the weights after, and
    the width of each forward's input."""
    widths = record_widths(engine)
    scored = engine.compute_log_probs(batch, entropy=True)
    gradients = record_gradients(engine)
    metrics = engine.train_step(batch, pg_loss)
    return {"log_probs": scored["log_probs"], "entropy": scored["entropy"], "metrics": metrics,
            "gradients": gradients, "weights": dict(engine.named_weights()), "widths": widths,
            "attention": engine.model.config._attn_implementation}


def value_loss(micro: Batch, outputs, stats):
    """Squared error of the values against the advantages (this micro-batch's share)."""
    error = (outputs["values"] - micro["advantages"]) * micro["response_mask"]
    return (error * error).sum() / stats.num_tokens, {}


def run_other_roles(sp: int, model_dir: str, batch: Batch) -> dict:
    """A critic's weights after one step and its values then (its head starts at zero), and a frozen
    reference with ``attention=flex`` (its no-grad forward runs on the CPU): its log-probs."""
    critic = FSDPTrainEngine(settings("shared_prompt", False, sp), EngineSpec(model_dir, "critic", total_train_steps=10))
    critic.train_step(batch, value_loss)
    result = {"values": critic.compute_values(batch)["values"], "critic_weights": dict(critic.named_weights())}
    critic.close()
    flex = dataclasses.replace(settings("packed", False, sp), attention="flex")
    reference = FSDPTrainEngine(flex, EngineSpec(model_dir, "ref", total_train_steps=10))
    result["flex_log_probs"] = reference.compute_log_probs(batch)["log_probs"]
    reference.close()
    return result


def _sp2_worker(rank: int, store: str, model_dirs: dict, batch: Batch, out_dir: str) -> None:
    torch.set_num_threads(1)
    dist.init_process_group("gloo", init_method=f"file://{store}", rank=rank, world_size=2)
    mine = batch.chunk(2)[rank]  # the controller's dp_split: 3 rows each
    results = []
    for layout, attention, checkpointing in CASES:
        engine = FSDPTrainEngine(settings(layout, checkpointing, 2, attention),
                                 EngineSpec(model_dirs[DENSE[attention]], "actor", total_train_steps=10))
        results.append(run_case(engine, mine))
        engine.close()
    results.append(run_other_roles(2, model_dirs["sdpa"], mine))
    dist.destroy_process_group()
    torch.save(results, f"{out_dir}/rank{rank}.pt")


@pytest.fixture(scope="module")
def eager_model_dir(tmp_path_factory):
    """:func:`test_fsdp_engine.tiny_qwen2` whose ``config.json`` asks for eager attention."""
    path = tiny_qwen2(tmp_path_factory.mktemp("qwen2_eager"))
    config_file = f"{path}/config.json"
    with open(config_file) as handle:
        config = json.load(handle)
    with open(config_file, "w") as handle:
        json.dump(config | {"attn_implementation": "eager"}, handle)
    return path


@pytest.mark.slow
@pytest.mark.timeout(600)  # a collective out of step between the ranks would hang
def test_sequence_parallel_2_equals_one_process(model_dir, eager_model_dir, engines, tmp_path):
    """Per case: SP = 2 on two processes (DP = 1) against one process with the dense mask, the same
    micro-batches; then a critic and a flex reference the same way."""
    batch = grouped_batch()
    model_dirs = {"sdpa": model_dir, "eager": eager_model_dir}
    expected = [run_case(engines(model_dirs[DENSE[attention]], **vars(settings(layout, checkpointing, 1))), batch)
                for layout, attention, checkpointing in CASES]
    mp.start_processes(_sp2_worker, args=(str(tmp_path / "store"), model_dirs, batch, str(tmp_path)), nprocs=2,
                       join=True, start_method="spawn")
    ranks = [torch.load(tmp_path / f"rank{rank}.pt") for rank in range(2)]
    for index, case in enumerate(CASES):
        want = expected[index]
        for name in ("log_probs", "entropy"):  # rank 0's rows, then rank 1's
            got = torch.cat([ranks[rank][index][name] for rank in range(2)])
            torch.testing.assert_close(got, want[name], atol=TOLERANCE, rtol=0, msg=f"{case} {name}")
        assert want["metrics"]["grad_norm"] > 1.0  # clipping is active in both runs
        assert want["attention"] == DENSE[case[1]]
        for result in (ranks[rank][index] for rank in range(2)):
            kernel = VARLEN if case[1] == "varlen" else case[1]
            assert result["attention"].startswith("rlloom_ulysses") and result["attention"].endswith(f":{kernel}")
            assert result["widths"] == [(width + 1) // 2 for width in want["widths"]]  # each rank half the slots
            for metric in ("loss_share", "grad_norm", "rows", "perf/model_flops/actor"):
                assert result["metrics"][metric] == pytest.approx(want["metrics"][metric], rel=TOLERANCE), (case, metric)
            assert_weights_close(result["gradients"], want["gradients"], atol=TOLERANCE)
            assert_weights_close(result["weights"], want["weights"], atol=TOLERANCE)
    others = run_other_roles(1, model_dir, batch)
    for name in ("values", "flex_log_probs"):
        got = torch.cat([ranks[rank][-1][name] for rank in range(2)])
        torch.testing.assert_close(got, others[name], atol=TOLERANCE, rtol=0, msg=name)
    assert others["values"].abs().sum() > 0 and others["flex_log_probs"].abs().sum() > 0
    for rank in range(2):
        assert_weights_close(ranks[rank][-1]["critic_weights"], others["critic_weights"], atol=TOLERANCE)


def _sp2_dp2_worker(rank: int, store: str, model_dir: str, batch: Batch, out_dir: str) -> None:
    """World 4: two sequence-parallel groups ({0, 1}, {2, 3}) as data-parallel replicas; each rank's
    rows cut as the controller's dispatch modes cut them."""
    torch.set_num_threads(1)
    dist.init_process_group("gloo", init_method=f"file://{store}", rank=rank, world_size=4)
    engine = FSDPTrainEngine(dataclasses.replace(settings("shared_prompt", False, 2), micro_batch_size=1),
                             EngineSpec(model_dir, "actor", total_train_steps=10))
    log_probs = engine.compute_log_probs(DataParallelSplit().scatter((batch,), {}, 4)[rank].args[0])["log_probs"]
    gradients = record_gradients(engine)
    metrics = engine.train_step(TokenBalancedSplit().scatter((batch, pg_loss), {}, 4)[rank].args[0], pg_loss)
    result = {"log_probs": log_probs, "metrics": metrics, "gradients": gradients,
              "weights": dict(engine.named_weights())}
    engine.close()
    dist.destroy_process_group()
    torch.save(result, f"{out_dir}/rank{rank}.pt")


@pytest.mark.slow
@pytest.mark.timeout(600)
def test_two_sequence_parallel_groups_as_data_parallel_replicas_equal_one_process(model_dir, engines, tmp_path):
    """SP = 2 × DP = 2 on four processes against one: the groups hold different numbers of
    micro-batches (one row each), so the lighter group adds padding passes, sequence-split too."""
    batch = grouped_batch()
    single = engines(model_dir, **{**vars(settings("shared_prompt", False, 1)), "micro_batch_size": 1})
    want_log_probs = single.compute_log_probs(batch)["log_probs"]
    want_gradients = record_gradients(single)
    want_metrics = single.train_step(batch, pg_loss)
    want_weights = dict(single.named_weights())
    mp.start_processes(_sp2_dp2_worker, args=(str(tmp_path / "store"), model_dir, batch, str(tmp_path)), nprocs=4,
                       join=True, start_method="spawn")
    ranks = [torch.load(tmp_path / f"rank{rank}.pt") for rank in range(4)]
    pieces = TokenBalancedSplit().pieces(batch, 4)
    assert len(pieces[0]) + len(pieces[1]) != len(pieces[2]) + len(pieces[3])  # the groups' micro-batches differ
    got = DataParallelSplit().gather([Batch({"log_probs": result["log_probs"]}) for result in ranks], (batch,), {})
    torch.testing.assert_close(got["log_probs"], want_log_probs, atol=TOLERANCE, rtol=0)
    for result in ranks:
        assert result["metrics"]["grad_norm"] == pytest.approx(want_metrics["grad_norm"], rel=TOLERANCE)
        assert result["metrics"]["perf/model_flops/actor"] == pytest.approx(want_metrics["perf/model_flops/actor"])
        assert_weights_close(result["gradients"], want_gradients, atol=TOLERANCE)
        assert_weights_close(result["weights"], want_weights, atol=TOLERANCE)


def test_each_rank_holds_its_slots_and_the_predictors_there():
    """``split_sequence``: the packs padded to an even width, each rank its half of the slots; every
    response token is scored on exactly one rank, at the state that predicts it."""
    batch = grouped_batch()
    whole = model_input(batch, "shared_prompt")
    width = whole.input_ids.shape[1]
    half = (width + 1) // 2
    parts = [split_sequence(whole, SequenceGroups(2, rank, None, None, 1)) for rank in range(2)]
    joined_ids = torch.cat([part.input_ids for part in parts], dim=1)
    torch.testing.assert_close(joined_ids[:, :width], whole.input_ids)
    assert all(part.input_ids.shape[1] == half and part.segments.shape[1] == 2 * half for part in parts)
    assert parts[0].shard.sizes == parts[1].shard.sizes and sum(parts[0].shard.sizes) == len(whole.targets)
    states = torch.cat([part.input_ids for part in parts], dim=1)  # stand-in "states": the slot's token
    slots = [(rank * half + part.predictors % half, part.predictors // half) for rank, part in enumerate(parts)]
    order = parts[0].shard.order
    seen = torch.cat([states[pack, slot] for slot, pack in slots])
    expected = whole.input_ids.flatten()[whole.predictors]
    torch.testing.assert_close(seen, expected[order])


def test_sdpa_layers_share_one_additive_mask(model_dir, engines):
    """The packing's mask reaches SDPA once, in the compute dtype: every layer keeps that one tensor for
    backward (a boolean mask would be turned into a float copy per layer, W² each, which sequence
    parallelism cannot split)."""
    engine = engines(model_dir)
    inputs = model_input(grouped_batch(), "shared_prompt")
    width = inputs.input_ids.shape[1]
    masks: list[torch.Tensor] = []

    def keep(tensor: torch.Tensor) -> torch.Tensor:
        if tensor.dim() == 4 and tuple(tensor.shape[-2:]) == (width, width):
            masks.append(tensor)
        return tensor

    with torch.autograd.graph.saved_tensors_hooks(keep, lambda tensor: tensor):
        engine.train_outputs(inputs, 1.0)
    assert len(masks) == engine.model.config.num_hidden_layers
    assert len({mask.data_ptr() for mask in masks}) == 1 and masks[0].dtype == torch.float32


@pytest.mark.parametrize(
    ("overrides", "message"),
    [
        ({"sequence_parallel_size": 0}, "train_engine.sequence_parallel_size=0: must be >= 1"),
        ({"sequence_parallel_size": 2, "sequence_layout": "padded"},
         "train_engine.sequence_parallel_size=2 needs a packed train_engine.sequence_layout (shared_prompt or "
         "packed), got padded"),
    ],
)
def test_invalid_sequence_parallel_settings_name_the_key(overrides, message):
    with pytest.raises(ValueError) as error:
        FSDPConfig(**overrides)
    assert str(error.value) == message


def test_heads_and_world_size_are_checked_before_weights_load(model_dir):
    """The engine checks at start (any world; ``launcher=local`` refuses SP > 1 when the config is composed,
    :func:`rlloom_trainer.local.check_one_process`): SP must divide the attention and key/value heads and
    the world size."""
    with pytest.raises(ValueError, match=r"sequence_parallel_size=3 must divide the model's num_key_value_heads \(2\)"):
        check_sequence_parallel(3, 6, 2, 3)
    with pytest.raises(ValueError, match=r"sequence_parallel_size=4 must divide the model's num_attention_heads \(6\)"):
        check_sequence_parallel(4, 6, 2, 4)
    with pytest.raises(ValueError, match=r"sequence_parallel_size=2 must divide the train engine's world size \(1;"
                                         r".*launcher=ray \+launcher.resource_pools.global=2"):
        check_sequence_parallel(2, 6, 2, 1)
    with pytest.raises(ValueError, match=r"sequence_parallel_size=2 must divide the train engine's world size \(1;"):
        FSDPTrainEngine(FSDPConfig(sequence_parallel_size=2), EngineSpec(model_dir, "actor", total_train_steps=10))


@pytest.mark.cuda("Ulysses all-to-all over NCCL: SP = 2 log-probs and gradients equal one GPU's", gpus=2)
def test_sequence_parallel_2_on_two_gpus_equals_one(model_dir, engines, tmp_path):
    """The CPU test's first case on two GPUs (NCCL; float32 compute, so the same tolerance)."""
    batch = grouped_batch()
    cuda = {"device": "cuda", "dtype": "float32"}
    expected = run_case(engines(model_dir, **{**vars(settings("packed", False, 1)), **cuda}), batch)
    mp.start_processes(_cuda_worker, args=(str(tmp_path / "store"), model_dir, batch, str(tmp_path)), nprocs=2,
                       join=True, start_method="spawn")
    ranks = [torch.load(tmp_path / f"rank{rank}.pt") for rank in range(2)]
    got = torch.cat([result["log_probs"] for result in ranks])
    torch.testing.assert_close(got, expected["log_probs"], atol=TOLERANCE, rtol=0)
    for result in ranks:
        assert_weights_close({k: v.cpu() for k, v in result["gradients"].items()},
                             {k: v.cpu() for k, v in expected["gradients"].items()}, atol=TOLERANCE)


def _cuda_worker(rank: int, store: str, model_dir: str, batch: Batch, out_dir: str) -> None:
    import os

    os.environ["LOCAL_RANK"] = str(rank)
    dist.init_process_group("cpu:gloo,cuda:nccl", init_method=f"file://{store}", rank=rank, world_size=2)
    engine = FSDPTrainEngine(FSDPConfig(**{**vars(settings("packed", False, 2)), "device": "cuda", "dtype": "float32"}),
                             EngineSpec(model_dir, "actor", total_train_steps=10))
    result = run_case(engine, batch.chunk(2)[rank])
    engine.close()
    dist.destroy_process_group()
    torch.save(result, f"{out_dir}/rank{rank}.pt")
