"""Device, precision, offload and MFU of the FSDP engine.

CPU cases run everywhere; CUDA cases need a GPU and skip with the reason otherwise. Reference
numbers come from plain transformers in float32 on the CPU (``test_fsdp_engine``'s helpers).
"""

from __future__ import annotations

import pytest
import torch

from rlloom import EngineSpec
from rlloom.choices import DeviceError
from rlloom_fsdp import FSDPConfig, FSDPTrainEngine
from rlloom_fsdp.perf import train_flops
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
)

NEEDS_CUDA = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU (FSDP2 on NCCL, bf16)")
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


@pytest.mark.parametrize("tied", [False, True])
def test_train_flops_counts_matmul_parameters(tied, model_dir, tied_model_dir):
    model = reference_model(tied_model_dir if tied else model_dir)
    embedding = model.get_input_embeddings().weight.numel()
    total = sum(p.numel() for p in model.parameters())  # tied: the shared matrix once
    expected = total if tied else total - embedding  # an untied embedding is only looked up
    assert train_flops(model) == 6.0 * expected


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
