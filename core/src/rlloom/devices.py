"""Which device a role runs on (``trainer.device``: ``auto``, ``cpu``, ``cuda``, ``cuda:N``), the
peak CUDA memory of a block of work, and of the process so far.

``auto`` is resolved where the role runs, not in the controller, so a Ray worker on a GPU node picks
CUDA even when the controller's machine has none. Engines resolve their devices and dtypes with
``rlloom_enginekit.devices``.
"""

from __future__ import annotations

import torch

from rlloom.choices import DeviceError, check_device_name


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
