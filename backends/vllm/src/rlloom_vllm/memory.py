"""Resident memory of this process, GPU memory in use, and returning idle tensor pages to the operating
system."""

from __future__ import annotations

import ctypes
import mmap
from collections.abc import Iterable

import psutil
import torch

_libc = ctypes.CDLL(None, use_errno=True)
_libc.madvise.argtypes = (ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int)


def rss_bytes() -> int:
    """Resident set size of this process now, in bytes."""
    return psutil.Process().memory_info().rss


def cuda_used_bytes(device: torch.device) -> int:
    """Memory in use on the CUDA ``device`` now, in bytes, by every process and allocator (total
    minus free, as the driver reports it): what vLLM's sleep gives back shows here, unlike in
    PyTorch's own allocator statistics."""
    free, total = torch.cuda.mem_get_info(device)
    return total - free


def release_pages(tensors: Iterable[torch.Tensor]) -> int:
    """``madvise(MADV_DONTNEED)`` the whole pages inside each distinct CPU storage of ``tensors``;
    return the bytes advised.

    The storages stay allocated and usable, but their pages leave the resident set until touched
    again, and then read as **zeros**: only call this on memory whose content is no longer needed
    (a KV cache between generation phases). Non-CPU tensors are skipped.
    """
    page = mmap.PAGESIZE
    seen: set[int] = set()
    released = 0
    for tensor in tensors:
        if tensor is None or tensor.device.type != "cpu":
            continue
        storage = tensor.untyped_storage()
        start, size = storage.data_ptr(), storage.nbytes()
        if start in seen or size == 0:
            continue
        seen.add(start)
        first = -(-start // page) * page
        last = (start + size) // page * page
        if last <= first:
            continue
        if _libc.madvise(first, last - first, mmap.MADV_DONTNEED) != 0:
            raise OSError(ctypes.get_errno(), f"madvise(MADV_DONTNEED) failed on {last - first} bytes")
        released += last - first
    return released
