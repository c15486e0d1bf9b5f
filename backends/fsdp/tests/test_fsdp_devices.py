"""Device, precision, offload, process group, host syncs and MFU of the FSDP engine.

CPU cases run everywhere; CUDA cases need a GPU and skip with the reason otherwise. Reference
numbers come from plain transformers in float32 on the CPU (``test_fsdp_engine``'s helpers). On CUDA
the engine's default is bf16 compute under FSDP2 even at world size 1 (``shard_model`` keeps a plain
module only for float32 at world size 1); on the CPU ``dtype="bfloat16"`` forces the same wrapping.
"""

from __future__ import annotations

import time
import warnings

import pytest
import torch
import torch.distributed as dist
from torch.distributed.fsdp import FSDPModule
from torch.distributed.tensor import DTensor
from torch.utils._python_dispatch import TorchDispatchMode

from rlloom import Batch, EngineSpec
from rlloom.algos.config import PolicyLossConfig
from rlloom.algos.policy_loss import make_policy_loss_fn
from rlloom.choices import DeviceError
from rlloom_enginekit.devices import peak_bf16_flops
from rlloom_fsdp import FSDPConfig, FSDPTrainEngine, process_group
from rlloom_fsdp.perf import train_flops
from rlloom_fsdp.scoring import model_input, score_responses
from test_fsdp_engine import (  # the shared fixtures and plain-transformers references
    assert_weights_close,
    engines,  # noqa: F401 - pytest fixture
    make_batch,
    model_dir,  # noqa: F401 - pytest fixture
    one_thread,  # noqa: F401 - pytest fixture
    pg_loss,
    reference_forward,
    reference_model,
    tied_model_dir,  # noqa: F401 - pytest fixture
    VOCAB,
)

NEEDS_CUDA = pytest.mark.cuda("FSDP2 on NCCL, bf16")
# bf16 keeps 8 bits of mantissa: the tiny model's log-probs (|log p| < 6) move by up to a few 1e-2.
BF16_LOG_PROB_ATOL = 5e-2


def test_device_and_dtype_settings_are_checked():
    with pytest.raises(ValueError, match=r"train_engine.device='gpu': choose one of \['auto', 'cpu', 'cuda'\]"):
        FSDPConfig(device="gpu")
    with pytest.raises(ValueError, match="train_engine.dtype must be one of"):
        FSDPConfig(dtype="fp8")


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the error on a machine without CUDA")
def test_cuda_without_a_gpu_names_the_setting(model_dir):
    with pytest.raises(DeviceError, match="train_engine.device=cuda: this machine has no usable CUDA device"):
        FSDPTrainEngine(FSDPConfig(device="cuda"), EngineSpec(model_dir, "actor"))


def test_auto_device_on_this_machine_follows_cuda_availability(model_dir, engines):
    engine = FSDPTrainEngine(FSDPConfig(), EngineSpec(model_dir, "actor", device="auto"))
    try:
        assert engine.device.type == ("cuda" if torch.cuda.is_available() else "cpu")
        assert engine.compute_dtype == (torch.bfloat16 if torch.cuda.is_available() else torch.float32)
    finally:
        engine.close()


def test_bfloat16_compute_keeps_float32_master_weights(model_dir, engines):
    """The mixed-precision path (bf16 compute, fp32 reduction and master weights) on the CPU."""
    batch = make_batch()
    engine = engines(model_dir, dtype="bfloat16")
    out = engine.compute_log_probs(batch, entropy=True)
    with torch.no_grad():
        expected, _ = reference_forward(reference_model(model_dir), batch)
    error = (out["log_probs"] - expected).abs().max()
    assert 0 < error < BF16_LOG_PROB_ATOL  # not fp32 (error > 0), but close
    before = dict(engine.named_weights())
    engine.train_step(batch, pg_loss)
    after = dict(engine.named_weights())
    assert all(tensor.dtype == torch.float32 for tensor in after.values())
    assert any(not torch.equal(before[name], after[name]) for name in before)


def test_head_chunking_does_not_change_results(model_dir, engines):
    batch = make_batch()
    one_row, default = engines(model_dir, head_chunk_rows=1), engines(model_dir)
    a, b = one_row.compute_log_probs(batch, entropy=True), default.compute_log_probs(batch, entropy=True)
    torch.testing.assert_close(a["log_probs"], b["log_probs"], atol=1e-6, rtol=0)
    torch.testing.assert_close(a["entropy"], b["entropy"], atol=1e-6, rtol=0)
    one_row.train_step(batch, pg_loss)
    default.train_step(batch, pg_loss)
    assert_weights_close(dict(one_row.named_weights()), dict(default.named_weights()), atol=1e-6)


def test_offload_is_a_no_op_on_cpu(model_dir, engines):
    batch = make_batch()
    moved, kept = engines(model_dir), engines(model_dir)
    moved.offload()
    moved.train_step(batch, pg_loss)
    moved.onload()
    kept.train_step(batch, pg_loss)
    assert_weights_close(dict(moved.named_weights()), dict(kept.named_weights()), atol=0)


def body_and_head_parameters(model) -> tuple[int, int]:
    """N_body (decoder layers and final norm) and N_head (the LM head), counted module by module."""
    body = sum(p.numel() for p in model.model.layers.parameters()) + model.model.norm.weight.numel()
    return body, model.lm_head.weight.numel()


@pytest.mark.parametrize("tied", [False, True])
def test_train_flops_counts_matmul_parameters(tied, model_dir, tied_model_dir):
    model = reference_model(tied_model_dir if tied else model_dir)
    body, head = body_and_head_parameters(model)
    assert head == VOCAB * 64
    flops = train_flops(model, model.get_output_embeddings())
    assert (flops.body, flops.head) == (6.0 * body, 6.0 * head)  # the input embedding only looked up


def inert_and_shared_batch() -> Batch:
    """Rows 0, 2 and 3 share one prompt; rows 1 (empty response) and 4 (zero advantages) are inert
    under the zero-advantage policy loss, so the engine trains rows [0, 2, 3, 5]."""
    batch = make_batch(rows=6, seed=1)
    for name in ("prompts", "prompt_mask"):
        batch[name][2] = batch[name][3] = batch[name][0]
    batch["advantages"][4] = 0.0
    return batch


def expected_step_flops(model_dir: str, batch: Batch, trained: list[int], micro_rows: int, layout: str) -> float:
    """6 · N_body · tokens + 6 · N_head · scored, by hand: the trained rows cut into micro-batches of
    ``micro_rows``; in ``shared_prompt`` a prompt counted once per micro-batch it appears in."""
    body, head = body_and_head_parameters(reference_model(model_dir))
    prompt_lengths, response_lengths = batch["prompt_mask"].sum(1).tolist(), batch["response_mask"].sum(1).tolist()
    tokens = 0
    for start in range(0, len(trained), micro_rows):
        rows = trained[start:start + micro_rows]
        prompt_rows = rows
        if layout == "shared_prompt":
            prompt_rows = list({tuple(batch["prompts"][row].tolist()): row for row in rows}.values())
        tokens += sum(prompt_lengths[row] for row in prompt_rows) + sum(response_lengths[row] for row in rows)
    scored = sum(response_lengths[row] for row in trained)
    return 6.0 * body * tokens + 6.0 * head * scored


@pytest.mark.parametrize("layout", ["shared_prompt", "packed", "padded"])
def test_model_flops_count_the_tokens_the_engine_trained(layout, model_dir, engines):
    """Inert rows are not run and a shared prompt runs once per micro-batch: the step's FLOPs count
    exactly that (the MFU's numerator), below the old 6 · N · (every row's prompt and response)."""
    batch = inert_and_shared_batch()
    engine = engines(model_dir, micro_batch_size=2, sequence_layout=layout)
    metrics = engine.train_step(batch, make_policy_loss_fn(PolicyLossConfig()))
    assert metrics["skipped_rows"] == pytest.approx(2 / 6)
    expected = expected_step_flops(model_dir, batch, [0, 2, 3, 5], 2, layout)
    assert metrics["perf/model_flops/actor"] == expected
    body, head = body_and_head_parameters(reference_model(model_dir))
    every_token = float(batch["prompt_mask"].sum() + batch["response_mask"].sum())
    assert expected < 6.0 * (body + head) * every_token


class HostReads(TorchDispatchMode):
    """Counts the ops that read a tensor's values back to the host (on a GPU each waits for it)."""

    READS = {"_local_scalar_dense", "nonzero", "masked_select", "_unique2", "unique_dim", "unique_consecutive"}

    def __init__(self):
        super().__init__()
        self.count = 0

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        self.count += func._overloadpacket.__name__ in self.READS
        return func(*args, **(kwargs or {}))


@pytest.mark.parametrize("layout", ["shared_prompt", "packed"])
def test_the_forward_and_backward_read_nothing_back(layout, model_dir):
    """The packing and the response-token index are built on the CPU (``model_input``); the scoring
    forward and its backward then never read a value back (on a GPU: no host sync per micro-batch).
    The padded layout with SDPA keeps transformers' own two reads (whether its mask can be skipped)."""
    model = reference_model(model_dir)
    inputs = model_input(make_batch(), layout)
    with HostReads() as reads:
        log_probs, entropy = score_responses(model, inputs, 0.7, True, 3)
        (log_probs.sum() + entropy.sum()).backward()
    assert reads.count == 0
    assert model.lm_head.weight.grad.abs().sum() > 0


def tensor_metrics_loss(micro: Batch, outputs, stats):
    """``pg_loss`` with its metrics as 0-d tensors (the engine sums them on the device)."""
    loss, metrics = pg_loss(micro, outputs, stats)
    return loss, {"loss_share": loss.detach(), "rows": torch.tensor(float(len(micro)), device=loss.device)}


def test_tensor_metrics_give_the_numbers_of_float_metrics(model_dir, engines):
    batch = make_batch()
    floats, tensors = engines(model_dir, micro_batch_size=2), engines(model_dir, micro_batch_size=2)
    assert floats.train_step(batch, pg_loss) == tensors.train_step(batch, tensor_metrics_loss)
    assert_weights_close(dict(tensors.named_weights()), dict(floats.named_weights()), atol=0)


def all_sharded(engine) -> bool:
    """Every parameter the modules hold is its sharded DTensor (FSDP2 swaps in a plain tensor while
    a module is gathered)."""
    return all(isinstance(parameter, DTensor) for parameter in engine.model.parameters())


@pytest.mark.parametrize("role, reshard_after_forward", [("ref", True), ("actor", False), ("critic", True)])
def test_no_grad_passes_leave_every_parameter_sharded(role, reshard_after_forward, model_dir, engines):
    """bfloat16 makes the engine wrap the model in FSDP2 at world size 1 on the CPU too. FSDP2 keeps the
    root's parameters (embeddings, LM head) gathered after forward for a backward a no-grad pass never
    runs, and with reshard_after_forward=False each layer's as well."""
    engine = engines(model_dir, role=role, dtype="bfloat16", reshard_after_forward=reshard_after_forward)
    assert isinstance(engine.model, FSDPModule) and all_sharded(engine)
    batch = make_batch()
    if role == "critic":
        engine.compute_values(batch)
    else:
        engine.compute_log_probs(batch)
    assert all_sharded(engine)


def test_a_group_created_here_has_nccl_wherever_cuda_is_available(model_dir):
    """Whatever device the first engine uses, so that a CUDA engine created after a CPU one (a CPU
    reference, say) gets NCCL."""
    assert process_group.backend_for(cuda_available=True) == "cpu:gloo,cuda:nccl"
    assert process_group.backend_for(cuda_available=False) == "gloo"
    if dist.is_initialized():
        pytest.skip("a process group created outside rlloom-fsdp exists; the engine does not create one")
    engine = FSDPTrainEngine(FSDPConfig(device="cpu"), EngineSpec(model_dir, "ref"))
    try:
        cuda_backend = "nccl" if torch.cuda.is_available() else "gloo"  # plain gloo serves CUDA tensors too
        assert dist.get_backend_config() == f"cpu:gloo,cuda:{cuda_backend}"
    finally:
        engine.close()


# ---------------------------------------------------------------------------------------------- CUDA
@NEEDS_CUDA
def test_cuda_bf16_log_probs_match_fp32_cpu_reference(model_dir, engines):
    batch = make_batch()
    engine = engines(model_dir, device="cuda")
    assert engine.compute_dtype == torch.bfloat16
    out = engine.compute_log_probs(batch, entropy=True)
    assert out["log_probs"].device.type == "cpu"
    with torch.no_grad():
        expected, expected_entropy = reference_forward(reference_model(model_dir), batch)
    torch.testing.assert_close(out["log_probs"], expected, atol=BF16_LOG_PROB_ATOL, rtol=0)
    torch.testing.assert_close(out["entropy"], expected_entropy, atol=BF16_LOG_PROB_ATOL, rtol=0)


@NEEDS_CUDA
def test_cuda_fp32_train_step_matches_cpu(model_dir, engines):
    batch = make_batch()
    gpu, cpu = engines(model_dir, device="cuda", dtype="float32"), engines(model_dir, device="cpu")
    metrics = gpu.train_step(batch, pg_loss)
    cpu.train_step(batch, pg_loss)
    gpu_weights = {name: tensor.cpu() for name, tensor in gpu.named_weights()}
    assert_weights_close(gpu_weights, dict(cpu.named_weights()), atol=1e-5)
    assert metrics["perf/max_memory_allocated_gb"] > 0
    assert metrics["perf/max_memory_reserved_gb"] >= metrics["perf/max_memory_allocated_gb"]


@NEEDS_CUDA
def test_cuda_offload_frees_the_gpu_and_onload_restores_the_step(model_dir, engines):
    batch = make_batch()
    moved, kept = engines(model_dir, device="cuda"), engines(model_dir, device="cuda")
    moved.train_step(batch, pg_loss)
    kept.train_step(batch, pg_loss)
    torch.cuda.synchronize()
    before = torch.cuda.memory_allocated()
    moved.offload()
    freed = before - torch.cuda.memory_allocated()
    params = sum(p.numel() for p in reference_model(model_dir).parameters())
    assert freed >= 3 * 4 * params  # fp32 weights and both AdamW moments left the GPU
    moved.train_step(batch, pg_loss)  # brings everything back by itself
    kept.train_step(batch, pg_loss)
    assert_weights_close(dict(moved.named_weights()), dict(kept.named_weights()), atol=0)


@NEEDS_CUDA
def test_cuda_checkpoint_loads_on_cpu(model_dir, engines, tmp_path):
    batch = make_batch()
    gpu = engines(model_dir, device="cuda", dtype="float32")
    gpu.train_step(batch, pg_loss)
    gpu.save(str(tmp_path / "ckpt"))
    expected = {name: tensor.cpu() for name, tensor in gpu.named_weights()}
    gpu.close()
    cpu = engines(model_dir, device="cpu")
    cpu.load(str(tmp_path / "ckpt"))
    assert_weights_close(dict(cpu.named_weights()), expected, atol=0)
