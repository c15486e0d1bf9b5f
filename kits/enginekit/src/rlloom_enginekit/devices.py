"""An engine's device and dtype, and the GPU figures and moves engines need.

``trainer.device`` is handed to every engine in :attr:`rlloom.types.EngineSpec.device`; an engine
whose own config sets ``device`` uses that instead (:func:`role_device`), resolved where the engine
runs (:func:`rlloom.choices.resolve_device`). Also: this rank's GPU, the wall-clock barrier, the
GPU's bf16 peak (for MFU), peak-memory metrics (the process's and a block's, :class:`CudaPeak`), and
moving a train engine's state between devices (offload / onload).
"""

from __future__ import annotations

import os

import torch

from rlloom.choices import DeviceError, resolve_device
from rlloom_enginekit.choices import DTYPE_CHOICES

DTYPES: dict[str, torch.dtype] = {  # every name of DTYPE_CHOICES but auto
    "float32": torch.float32,
    "bfloat16": torch.bfloat16,
    "float16": torch.float16,
}


def role_device(own: str | None, spec_device: str, key: str) -> torch.device:
    """The device of one role: its own config's ``device`` when set (``key`` names that setting),
    else the run's (``EngineSpec.device``)."""
    return resolve_device(own, key) if own else resolve_device(spec_device, "trainer.device")


def resolve_dtype(name: str, device: torch.device, key: str) -> torch.dtype:
    """``auto`` → bfloat16 on CUDA, float32 elsewhere (half types are many times slower on CPUs
    without native support); otherwise the named dtype. ``key`` names the setting in errors."""
    if name == "auto":
        return torch.bfloat16 if device.type == "cuda" else torch.float32
    if name not in DTYPES:
        raise DeviceError(f"{key}={name!r}: choose one of {list(DTYPE_CHOICES)}")
    return DTYPES[name]


def tensor_core_operands(hidden: torch.Tensor, weight: torch.Tensor) -> bool:
    """Whether ``hidden @ weight^T`` can run on tensor cores with a float32 result
    (``torch.mm(..., out_dtype=torch.float32)``): bfloat16 or float16 operands of one dtype on a CUDA
    GPU. The products of two 16-bit numbers are exact in float32, so the result equals the float32
    product of the upcast operands up to the order of the sums (the LM heads of the trainer and of
    the rollout both form their logits this way)."""
    return hidden.is_cuda and hidden.dtype == weight.dtype and hidden.dtype in (torch.bfloat16, torch.float16)


def synchronize(device: torch.device) -> None:
    """Wait for the device's queued work (a no-op on CPU): call before reading a wall clock."""
    if device.type == "cuda":
        torch.cuda.synchronize(device)


# Dense bf16 tensor-core peaks (FLOP/s) from the vendors' data sheets, matched against
# torch.cuda.get_device_name(); the first matching entry wins.
PEAK_BF16_FLOPS: tuple[tuple[str, float], ...] = (
    ("H200", 989.4e12),
    ("H100 PCIe", 756.0e12),
    ("H100", 989.4e12),
    ("A100", 312.0e12),
)


def peak_bf16_flops(device: torch.device) -> float | None:
    """The device's dense bf16 peak in FLOP/s, or None when it is not a GPU listed in
    :data:`PEAK_BF16_FLOPS` (then no MFU is reported)."""
    if device.type != "cuda":
        return None
    name = torch.cuda.get_device_name(device)
    return next((peak for key, peak in PEAK_BF16_FLOPS if key in name), None)


# Peaks (allocated, reserved bytes) per CUDA device index from before the last reset by CudaPeak.
_peaks_before_reset: dict[int, tuple[int, int]] = {}


def cuda_peak_bytes(device: torch.device) -> tuple[int, int]:
    """This process's peak CUDA memory on ``device`` so far, (allocated by tensors, reserved by the
    caching allocator) in bytes: torch's peak statistics, which :class:`CudaPeak` resets, combined
    with the peaks it read just before each reset."""
    index = torch.cuda.current_device() if device.index is None else device.index
    earlier = _peaks_before_reset.get(index, (0, 0))
    return (max(earlier[0], torch.cuda.max_memory_allocated(index)),
            max(earlier[1], torch.cuda.max_memory_reserved(index)))


class CudaPeak:
    """``with CudaPeak() as peak: ...`` then ``peak.extra_bytes``: the most CUDA memory this process
    allocated inside the block beyond what it held when it started (None without an initialised
    CUDA context: nothing of this process is on a GPU). Resets the current device's peak statistics,
    keeping the peaks before the reset for :func:`cuda_peak_bytes`."""

    def __enter__(self) -> CudaPeak:
        self.extra_bytes: int | None = None
        self._active = torch.cuda.is_available() and torch.cuda.is_initialized()
        if self._active:
            torch.cuda.synchronize()
            self._before = torch.cuda.memory_allocated()
            index = torch.cuda.current_device()
            _peaks_before_reset[index] = cuda_peak_bytes(torch.device("cuda", index))
            torch.cuda.reset_peak_memory_stats()
        return self

    def __exit__(self, *exc: object) -> None:
        if self._active:
            torch.cuda.synchronize()
            self.extra_bytes = max(0, torch.cuda.max_memory_allocated() - self._before)


def cuda_memory_metrics(device: torch.device) -> dict[str, float]:
    """``perf/max_memory_allocated_gb`` and ``perf/max_memory_reserved_gb``: this process's peak
    CUDA memory held by tensors and by PyTorch's caching allocator so far, in GB (1e9 bytes); a
    weight sync's peak measurement (:class:`CudaPeak`) does not lower them."""
    allocated, reserved = cuda_peak_bytes(device)
    return {"perf/max_memory_allocated_gb": allocated / 1e9, "perf/max_memory_reserved_gb": reserved / 1e9}


def rank_device(device: torch.device) -> torch.device:
    """On CUDA without an explicit index, the GPU of this rank: ``LOCAL_RANK`` (set by torchrun
    and similar launchers) when it names a visible device, else the current one (Ray makes a
    worker's single GPU device 0)."""
    if device.type != "cuda" or device.index is not None:
        return device
    local_rank = int(os.environ.get("LOCAL_RANK", -1))
    if 0 <= local_rank < torch.cuda.device_count():
        return torch.device("cuda", local_rank)
    return torch.device("cuda", torch.cuda.current_device())


def move_optimizer_state(optimizer: torch.optim.Optimizer, device: torch.device) -> None:
    """Move the optimizer's per-parameter state tensors (AdamW's moments) to ``device`` in place of
    the old ones. Scalar state (AdamW's ``step`` counter) stays where the optimizer keeps it: on
    the CPU unless the optimizer is ``capturable``."""
    for state in optimizer.state.values():
        for key, value in state.items():
            if isinstance(value, torch.Tensor) and value.dim() > 0:
                state[key] = value.to(device, non_blocking=True)


def move_train_state(model: torch.nn.Module, optimizer: torch.optim.Optimizer | None, device: torch.device) -> None:
    """Move a train engine's parameters (and gradients) and its optimizer's state to ``device``
    (:meth:`TrainEngine.offload` / ``onload``); moving to the CPU also returns the GPU's cached
    blocks, so a colocated engine can use the memory."""
    model.to(device)
    if optimizer is not None:
        move_optimizer_state(optimizer, device)
    if device.type == "cpu" and torch.cuda.is_available():
        torch.cuda.empty_cache()
