"""Which device a role runs on, and the dtypes that go with it.

``trainer.device`` (``auto``, ``cpu``, ``cuda``, ``cuda:N``) is handed to every engine in
:attr:`rlloom.types.EngineSpec.device`; an engine whose own config sets ``device`` uses that
instead (:func:`role_device`). ``auto`` is resolved where the engine runs, not in the controller,
so a Ray worker on a GPU node picks CUDA even when the controller's machine has none.
"""

from __future__ import annotations

import os

import torch

from rlloom.choices import DTYPE_CHOICES, DeviceError, check_device_name

DTYPES: dict[str, torch.dtype] = {  # every name of DTYPE_CHOICES but auto
    "float32": torch.float32,
    "bfloat16": torch.bfloat16,
    "float16": torch.float16,
}


def resolve_device(name: str, key: str = "trainer.device") -> torch.device:
    """``auto`` → ``cuda`` (no index: the current CUDA device) when CUDA is available, else ``cpu``;
    ``cuda`` on a machine without CUDA raises a :class:`DeviceError` that names ``key`` and the way out."""
    check_device_name(key, name)
    if name == "auto":
        name = "cuda" if torch.cuda.is_available() else "cpu"
    device = torch.device(name)
    if device.type == "cuda":
        if not torch.cuda.is_available():
            raise DeviceError(
                f"{key}={name}: this machine has no usable CUDA device (torch {torch.__version__}, "
                f"CUDA build: {torch.version.cuda or 'no'}); use {key}=cpu or {key}=auto"
            )
        if device.index is not None and device.index >= torch.cuda.device_count():
            raise DeviceError(f"{key}={name}: only {torch.cuda.device_count()} CUDA device(s) are visible")
    return device


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


def cuda_memory_metrics(device: torch.device) -> dict[str, float]:
    """``perf/max_memory_allocated_gb`` and ``perf/max_memory_reserved_gb``: this process's peak
    CUDA memory held by tensors and by PyTorch's caching allocator so far, in GB (1e9 bytes)."""
    return {
        "perf/max_memory_allocated_gb": torch.cuda.max_memory_allocated(device) / 1e9,
        "perf/max_memory_reserved_gb": torch.cuda.max_memory_reserved(device) / 1e9,
    }


class CudaPeak:
    """``with CudaPeak() as peak: ...`` then ``peak.extra_bytes``: the most CUDA memory this process
    allocated inside the block beyond what it held when it started (None without an initialised
    CUDA context: nothing of this process is on a GPU). Resets the device's peak statistics."""

    def __enter__(self) -> CudaPeak:
        self.extra_bytes: int | None = None
        self._active = torch.cuda.is_available() and torch.cuda.is_initialized()
        if self._active:
            torch.cuda.synchronize()
            self._before = torch.cuda.memory_allocated()
            torch.cuda.reset_peak_memory_stats()
        return self

    def __exit__(self, *exc: object) -> None:
        if self._active:
            torch.cuda.synchronize()
            self.extra_bytes = max(0, torch.cuda.max_memory_allocated() - self._before)


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
