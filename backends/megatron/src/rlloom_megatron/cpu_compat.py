"""Running megatron-core on CPU (gloo), applied only when no CUDA device is usable.

megatron-core assumes a GPU in a few places that a CPU run reaches: tensors allocated with
``device=torch.cuda.current_device()`` (RoPE's inverse frequencies, the global memory buffer used
by tensor-parallel gathers, a few attention buffers) and the model-parallel RNG tracker, which
saves and restores the *CUDA* generator's state around dropout and initialisation.

:func:`enable` redirects exactly those, and only inside the megatron modules listed in
:data:`PATCHED_MODULES`: each gets a module-level ``torch`` whose ``torch.cuda.current_device()``
is ``"cpu"`` and whose CUDA RNG calls act on the CPU generator (everything else forwards to the
real ``torch``), and ``tensor_parallel.random``'s two private RNG-state helpers act on the CPU
generator. Nothing outside megatron changes, no installed file is edited, and on a machine with
CUDA :func:`enable` does nothing. ``tests/test_megatron_cpu_compat.py`` fails loudly when a
megatron-core release moves these calls (a listed module no longer uses them, or a forward and
backward on CPU breaks), so an upgrade cannot silently bypass the layer.

Tested with megatron-core 0.16.1 (Python 3.11); 0.19 runs only on GPU machines here (Python 3.12).
"""

from __future__ import annotations

import importlib
import types

import torch

# Modules whose functions call torch.cuda.current_device() or the CUDA RNG on paths a CPU run takes.
PATCHED_MODULES = (
    "megatron.core.models.common.embeddings.rotary_pos_embedding",
    "megatron.core.tensor_parallel.layers",
    "megatron.core.tensor_parallel.random",
    "megatron.core.transformer.attention",
    "megatron.core.transformer.dot_product_attention",
    "megatron.core.utils",
)

_enabled = False


class _CpuCuda(types.ModuleType):
    """``torch.cuda`` as the patched modules see it: the current device is the CPU and the RNG
    calls act on the CPU generator; any other attribute is the real ``torch.cuda``'s."""

    def __init__(self) -> None:
        super().__init__("torch.cuda (rlloom cpu_compat)")

    @staticmethod
    def current_device() -> str:
        return "cpu"

    @staticmethod
    def get_rng_state(device=None) -> torch.Tensor:
        return torch.get_rng_state()

    @staticmethod
    def set_rng_state(state: torch.Tensor, device=None) -> None:
        torch.set_rng_state(state)

    @staticmethod
    def manual_seed(seed: int) -> None:
        torch.manual_seed(seed)

    def __getattr__(self, name: str):
        return getattr(torch.cuda, name)


class _CpuTorch(types.ModuleType):
    """``torch`` as the patched modules see it: the real module except ``torch.cuda``."""

    def __init__(self) -> None:
        super().__init__("torch (rlloom cpu_compat)")
        self.cuda = _CpuCuda()

    def __getattr__(self, name: str):
        return getattr(torch, name)


def _cpu_rng_state(*args, **kwargs) -> torch.Tensor:
    return torch.get_rng_state()


def _set_cpu_rng_state(new_state: torch.Tensor, *args, **kwargs) -> None:
    torch.set_rng_state(new_state)


def needed() -> bool:
    """Whether megatron-core needs the layer here: no usable CUDA device."""
    return not torch.cuda.is_available()


def enable() -> bool:
    """Apply the redirections when :func:`needed` (once per process); whether they are active."""
    global _enabled
    if _enabled or not needed():
        return _enabled
    cpu_torch = _CpuTorch()
    for name in PATCHED_MODULES:
        module = importlib.import_module(name)
        if getattr(module, "torch", None) is not torch:
            raise RuntimeError(f"rlloom-megatron's CPU layer expected {name} to import torch as `torch`; this "
                               f"megatron-core release changed it: update rlloom_megatron.cpu_compat")
        module.torch = cpu_torch
    random = importlib.import_module("megatron.core.tensor_parallel.random")
    for helper in ("_get_cuda_rng_state", "_set_cuda_rng_state"):
        if not callable(getattr(random, helper, None)):
            raise RuntimeError(f"rlloom-megatron's CPU layer expected megatron.core.tensor_parallel.random."
                               f"{helper}; this megatron-core release removed it: update rlloom_megatron.cpu_compat")
    random._get_cuda_rng_state = _cpu_rng_state
    random._set_cuda_rng_state = _set_cpu_rng_state
    _enabled = True
    return True
