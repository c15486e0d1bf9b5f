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
from rlloom.choices import DeviceError
from rlloom_algokit.config import PolicyLossConfig
from rlloom_algokit.policy_loss import make_policy_loss_fn
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
    pg_objective,
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
    with pytest.raises(ValueError, match="train_engine.dtype=.*: must be one of"):
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


def test_train_flops_charge_a_frozen_parameter_no_weight_gradient(model_dir):
    model = reference_model(model_dir)
    body, head = body_and_head_parameters(model)
    frozen = model.model.layers[0].mlp.down_proj.weight  # as LoRA freezes its base weights
    frozen.requires_grad_(False)
    model.lm_head.weight.requires_grad_(False)
    flops = train_flops(model, model.get_output_embeddings())
    assert (flops.body, flops.head) == (6.0 * (body - frozen.numel()) + 4.0 * frozen.numel(), 4.0 * head)


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

    READS = {"_local_scalar_dense", "nonzero", "masked_select", "masked_scatter_backward",  # selects by a mask
             "_unique2", "unique_dim", "unique_consecutive"}

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
    """``pg_loss`` with its metrics as 0-d tensors (the engine sums them on the device; nothing here
    reads a value back or copies one to the GPU)."""
    loss = pg_objective(micro, outputs, stats)
    return loss, {"loss_share": loss.detach(), "rows": torch.full((), float(len(micro)), device=loss.device)}


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


def test_one_rank_weights_are_whole_fresh_copies_without_a_gather(model_dir, engines, monkeypatch):
    """On a one-rank mesh each FSDP2 shard is the whole tensor: ``named_weights`` copies it without an
    all-gather per tensor (weight sync on one GPU), equal to the gathered tensor and not an alias."""
    engine = engines(model_dir, dtype="bfloat16")
    assert isinstance(engine.model, FSDPModule)
    gathered = {name: param.full_tensor().clone() for name, param in engine.model.named_parameters()}
    monkeypatch.setattr(DTensor, "full_tensor", lambda self: pytest.fail("all-gathered on a one-rank mesh"))
    weights = dict(engine.named_weights())
    assert weights.keys() <= gathered.keys() and len(weights) >= len(gathered) - 1  # a tied head once
    for name, weight in weights.items():
        assert not isinstance(weight, DTensor) and torch.equal(weight, gathered[name]), name
    first = next(iter(weights))
    weights[first].add_(1.0)
    assert torch.equal(dict(engine.named_weights())[first], gathered[first])


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
    gpu.train_step(batch, pg_loss)
    cpu.train_step(batch, pg_loss)
    assert_weights_close(on_cpu(gpu), dict(cpu.named_weights()), atol=1e-5)


def on_cpu(engine) -> dict[str, torch.Tensor]:
    return {name: tensor.cpu() for name, tensor in engine.named_weights()}


def relative_gap(actual: dict, expected: dict, start: dict) -> float:
    """||actual − expected|| / ||expected − start|| over all weights: how far two runs' updates differ,
    relative to the update itself."""
    gap = sum(float((actual[name] - expected[name]).square().sum()) for name in expected)
    update = sum(float((expected[name] - start[name]).square().sum()) for name in expected)
    return (gap / update) ** 0.5


# The default CUDA engine against the float32 CPU one: Adam's eps = 1e-2 keeps its step insensitive to
# bf16 noise in small gradients; a step moves weights by about lr = 1e-2, the runs stay within
# BF16_WEIGHT_ATOL of each other and their updates within BF16_UPDATE_GAP (relative L2).
BF16_EPS, BF16_WEIGHT_ATOL, BF16_UPDATE_GAP = 1e-2, 3e-3, 0.1


@pytest.mark.parametrize("device", ["cpu", pytest.param("cuda", marks=NEEDS_CUDA)])
def test_bf16_fsdp_steps_match_fp32_cpu_and_the_checkpoint_loads_on_both(device, model_dir, engines, tmp_path):
    """The engine as a CUDA run builds it by default — bf16 compute under FSDP2 (over NCCL), float32
    master weights; on the CPU ``dtype=bfloat16`` builds the same — takes two steps on one batch (the
    loss falls, the weights move like the float32 CPU engine's), saves, and the checkpoint loads into a
    plain float32 CPU engine and one like itself with equal weights; the latter then takes the saved
    engine's next step (AdamW state and LR position restored)."""
    batch, following = make_batch(), make_batch(seed=2)
    dtype = "bfloat16" if device == "cpu" else "auto"
    gpu = engines(model_dir, device=device, dtype=dtype, eps=BF16_EPS)
    cpu = engines(model_dir, device="cpu", eps=BF16_EPS)
    assert gpu.compute_dtype == torch.bfloat16 and isinstance(gpu.model, FSDPModule)
    if device == "cuda":
        assert dist.get_backend_config() == "cpu:gloo,cuda:nccl"
    start = dict(cpu.named_weights())
    gpu_losses, cpu_losses = [], []
    for _ in range(2):
        gpu_losses.append(gpu.train_step(batch, pg_loss)["loss_share"])
        cpu_losses.append(cpu.train_step(batch, pg_loss)["loss_share"])
    assert gpu_losses[1] < gpu_losses[0] and cpu_losses[1] < cpu_losses[0]
    assert gpu_losses == pytest.approx(cpu_losses, abs=2e-2)
    trained, expected = on_cpu(gpu), dict(cpu.named_weights())
    assert max(float((expected[name] - start[name]).abs().max()) for name in start) > 1e-2
    assert_weights_close(trained, expected, atol=BF16_WEIGHT_ATOL)
    assert relative_gap(trained, expected, start) < BF16_UPDATE_GAP

    gpu.save(str(tmp_path / "ckpt"))
    for settings in ({"device": "cpu"}, {"device": device, "dtype": dtype}):  # plain, then like the saver
        resumed = engines(model_dir, eps=BF16_EPS, **settings)
        resumed.load(str(tmp_path / "ckpt"))
        assert_weights_close(on_cpu(resumed), trained, atol=0)
    resumed.train_step(following, pg_loss)
    gpu.train_step(following, pg_loss)
    assert_weights_close(on_cpu(resumed), on_cpu(gpu), atol=1e-4)  # a lost AdamW state would differ by ~lr


@NEEDS_CUDA
def test_cuda_mfu_and_memory_metrics_match_independent_measures(model_dir, engines):
    """The step's FLOPs are those counted by hand (shared prompt, inert rows left out); the MFU is
    FLOPs / (seconds · peak) with the engine's own seconds inside the test's wall time; the memory
    metrics are CUDA's peaks, which hold at least the float32 weights, gradients and AdamW moments."""
    batch, loss = inert_and_shared_batch(), make_policy_loss_fn(PolicyLossConfig())
    engine = engines(model_dir, device="cuda", micro_batch_size=2)
    engine.train_step(batch, loss)  # first-step set-up (FSDP's lazy init, cuBLAS) out of the timing
    torch.cuda.synchronize()
    torch.cuda.reset_peak_memory_stats()
    started = time.perf_counter()
    metrics = engine.train_step(batch, loss)
    elapsed = time.perf_counter() - started
    allocated, reserved = torch.cuda.max_memory_allocated(), torch.cuda.max_memory_reserved()
    assert metrics["perf/max_memory_allocated_gb"] == allocated / 1e9
    assert metrics["perf/max_memory_reserved_gb"] == reserved / 1e9
    parameters = sum(p.numel() for p in reference_model(model_dir).parameters())
    assert allocated >= 16 * parameters
    flops = expected_step_flops(model_dir, batch, [0, 2, 3, 5], 2, "shared_prompt")
    assert metrics["perf/model_flops/actor"] == flops
    peak = peak_bf16_flops(engine.device)
    if peak is None:
        assert "perf/mfu/actor" not in metrics
        return
    seconds = flops / (metrics["perf/mfu/actor"] * peak)  # the engine's step time
    assert 0.5 * elapsed < seconds <= elapsed


@NEEDS_CUDA
def test_cuda_reference_log_probs_leave_nothing_gathered(model_dir, engines):
    """After a no-grad pass of the default (bf16, FSDP2) reference engine, resharding every module
    frees nothing more: no gathered copy of the embeddings or LM head is left behind."""
    ref = engines(model_dir, role="ref", device="cuda")
    ref.compute_log_probs(make_batch())
    assert all_sharded(ref)
    torch.cuda.synchronize()
    held = torch.cuda.memory_allocated()
    for module in ref.model.modules():
        if isinstance(module, FSDPModule):
            module.reshard()
    assert torch.cuda.memory_allocated() == held


@NEEDS_CUDA
def test_cuda_engine_created_after_a_cpu_engine_trains_over_nccl(model_dir, engines):
    if dist.is_initialized():
        pytest.skip("a process group created outside rlloom-fsdp exists; the engine does not create one")
    cpu = engines(model_dir, role="ref", device="cpu")
    gpu = engines(model_dir, device="cuda")
    assert dist.get_backend_config() == "cpu:gloo,cuda:nccl"
    batch = make_batch()
    before = on_cpu(gpu)
    metrics = gpu.train_step(batch, pg_loss)
    assert metrics["grad_norm"] > 0 and metrics["skipped_update"] == 0.0
    assert any(not torch.equal(before[name], weight) for name, weight in on_cpu(gpu).items())
    assert cpu.compute_log_probs(batch)["log_probs"].abs().sum() > 0


def count_syncs(engine, batch: Batch) -> int:
    """Host syncs CUDA reports (``set_sync_debug_mode``) during one ``train_step``."""
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        torch.cuda.set_sync_debug_mode("warn")
        try:
            engine.train_step(batch, tensor_metrics_loss)
        finally:
            torch.cuda.set_sync_debug_mode("default")
    return sum("synchroniz" in str(warning.message) for warning in caught)


@NEEDS_CUDA
def test_cuda_train_step_syncs_do_not_grow_with_micro_batches(model_dir, engines):
    """1, 3 and 6 micro-batches of the same rows: about the same number of host syncs per step (the
    step's own reads: counts, metrics once, grad norm), none per micro-batch: a read per micro-batch
    would add at least five from 1 to 6 micro-batches. On the H100 (2026-11-27) the counts were
    15, 14 and 14: the first engine of the process has one more, whatever its micro-batches."""
    batch = make_batch()
    counts = {}
    for rows in (6, 2, 1):
        engine = engines(model_dir, device="cuda", micro_batch_size=rows)
        engine.train_step(batch, tensor_metrics_loss)  # first-step set-up
        counts[rows] = count_syncs(engine, batch)
    assert counts[6] > 0  # the debug mode sees the step's reads
    assert max(counts.values()) - min(counts.values()) <= 1, counts


@NEEDS_CUDA
def test_cuda_offload_frees_the_gpu_and_onload_restores_the_step(model_dir, engines):
    """Offload moves every parameter and AdamW moment to the host; the step after onload equals the
    step of the same engine that never offloaded, bitwise, and both stay within bf16 of float32 CPU."""
    batch, following = make_batch(), make_batch(seed=2)
    moved, kept = engines(model_dir, device="cuda", eps=BF16_EPS), engines(model_dir, device="cuda", eps=BF16_EPS)
    cpu = engines(model_dir, device="cpu", eps=BF16_EPS)
    start = dict(cpu.named_weights())
    for engine in (moved, kept, cpu):
        engine.train_step(batch, pg_loss)
    torch.cuda.synchronize()
    before = torch.cuda.memory_allocated()
    moved.offload()
    freed = before - torch.cuda.memory_allocated()
    state = [*moved.model.parameters(), *(value for held in moved.optimizer.state.values()
                                          for value in held.values() if value.dim() > 0)]
    assert all(local(tensor).device.type == "cpu" for tensor in state)
    params = sum(p.numel() for p in reference_model(model_dir).parameters())
    assert freed >= 3 * 4 * params  # fp32 weights and both AdamW moments left the GPU
    for engine in (moved, kept, cpu):
        engine.train_step(following, pg_loss)  # moved brings everything back by itself
    assert all(local(tensor).device.type == "cuda" for tensor in moved.model.parameters())
    assert_weights_close(on_cpu(moved), on_cpu(kept), atol=0)
    assert_weights_close(on_cpu(moved), dict(cpu.named_weights()), atol=BF16_WEIGHT_ATOL)
    assert relative_gap(on_cpu(moved), dict(cpu.named_weights()), start) < BF16_UPDATE_GAP


def local(tensor: torch.Tensor) -> torch.Tensor:
    return tensor.to_local() if isinstance(tensor, DTensor) else tensor


@NEEDS_CUDA
def test_cuda_checkpoint_loads_on_cpu(model_dir, engines, tmp_path):
    batch = make_batch()
    gpu = engines(model_dir, device="cuda", dtype="float32")
    gpu.train_step(batch, pg_loss)
    gpu.save(str(tmp_path / "ckpt"))
    expected = on_cpu(gpu)
    gpu.close()
    cpu = engines(model_dir, device="cpu")
    cpu.load(str(tmp_path / "ckpt"))
    assert_weights_close(dict(cpu.named_weights()), expected, atol=0)
