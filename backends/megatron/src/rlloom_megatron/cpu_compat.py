"""Running megatron-core on CPU (gloo), applied while this process's Megatron engines run on the CPU,
whether or not the host has a GPU.

megatron-core assumes a GPU in a few places that a CPU run reaches: tensors allocated with
``device=torch.cuda.current_device()`` or ``device="cuda"`` (RoPE's inverse frequencies, the global
memory buffer used by tensor-parallel gathers, attention buffers, the DDP gradient buffers, the
optimizer's scalars and gradient-norm sums), the current CUDA stream (0.19's DDP waits on it), the
model-parallel RNG tracker, which saves and restores the *CUDA* generator's state around dropout
and initialisation, and its optimizers' checks that a parameter's ``Tensor.type()`` is
``torch.cuda.FloatTensor`` (or the half types). On a host without CUDA these calls fail; on a host
with one they put a CPU engine's buffers on ``cuda:0`` beside its CPU parameters.

:func:`enable` redirects all but the last, and only inside the megatron modules listed in
:data:`PATCHED_MODULES`: each gets a module-level ``torch`` whose ``torch.cuda.current_device()`` is
``"cpu"``, ``torch.cuda.current_stream()`` the CPU's and ``torch.cuda.is_available()`` false, whose
tensor factories (:data:`FACTORIES`) put a tensor asked for on ``"cuda"`` on the CPU, and whose CUDA
RNG calls act on the CPU generator (everything else forwards to the real ``torch``); and
``tensor_parallel.random``'s two private RNG-state helpers act on the CPU generator. :func:`disable`
puts the real ones back. The redirections are process-wide (module globals), so a process runs
its Megatron engines either all on the CPU or all on CUDA: :func:`rlloom_megatron.parallel.acquire`
turns the layer on for the first engine when :func:`needed` for its device, off after the last,
and refuses an engine on another device in between.
The type checks are met by :func:`cuda_type_names`, a block (the engine wraps building and stepping
megatron-core's optimizer in it) inside which ``Tensor.type()`` names a CPU tensor's type as its
CUDA twin. Nothing outside megatron changes, no installed file is edited, and while the layer is
off :func:`cuda_type_names` is an empty block.
``tests/test_megatron_cpu_compat.py`` fails loudly when a megatron-core release moves these calls (a
listed module no longer makes them, or a forward, backward and optimizer step on CPU breaks), so an
upgrade cannot silently bypass the layer.

Tested with megatron-core 0.16.1 (Python 3.11) and 0.19.2's Python code; 0.19 installs only on
Python ≥ 3.12.
"""

from __future__ import annotations

import contextlib
import importlib
import types
from collections.abc import Iterator

import torch
from torch.overrides import TorchFunctionMode

# Modules whose functions call torch.cuda.current_device() or the CUDA RNG on paths a CPU run takes.
PATCHED_MODULES = (
    "megatron.core.models.common.embeddings.rotary_pos_embedding",
    "megatron.core.tensor_parallel.layers",
    "megatron.core.tensor_parallel.random",
    "megatron.core.transformer.attention",
    "megatron.core.transformer.dot_product_attention",
    "megatron.core.utils",
    "megatron.core.distributed.param_and_grad_buffer",
    "megatron.core.optimizer.distrib_optimizer",
    "megatron.core.optimizer.optimizer",
    "megatron.core.optimizer.clip_grads",
)

# The tensor factories the patched modules call with a CUDA device.
FACTORIES = ("tensor", "zeros", "empty", "ones", "full")

# ``tensor_parallel.random``'s private helpers that save and restore the CUDA generator's state.
RNG_HELPERS = ("_get_cuda_rng_state", "_set_cuda_rng_state")
# The real RNG helpers while the layer is on (empty while it is off).
_saved_helpers: dict[str, object] = {}


class _CpuCuda(types.ModuleType):
    """``torch.cuda`` as the patched modules see it: the current device is the CPU and the RNG
    calls act on the CPU generator; any other attribute is the real ``torch.cuda``'s."""

    def __init__(self) -> None:
        super().__init__("torch.cuda (rlloom cpu_compat)")

    @staticmethod
    def current_device() -> str:
        return "cpu"

    @staticmethod
    def is_available() -> bool:
        """False: the patched modules see a host whose "CUDA device" is the CPU."""
        return False

    @staticmethod
    def current_stream(device=None) -> torch.cpu.Stream:
        """The CPU's stream (megatron-core 0.19 waits on the current stream's events before a
        gradient reduction; on the CPU there are none)."""
        return torch.cpu.current_stream()

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


def _on_cpu(factory):
    """``factory`` with a CUDA ``device`` argument replaced by the CPU."""

    def make(*args, **kwargs):
        device = kwargs.get("device")
        if device is not None and torch.device(device).type == "cuda":
            kwargs["device"] = "cpu"
        return factory(*args, **kwargs)

    return make


class _CpuTorch(types.ModuleType):
    """``torch`` as the patched modules see it: the real module except ``torch.cuda`` and the
    tensor factories, which allocate on the CPU what they are asked to allocate on CUDA."""

    def __init__(self) -> None:
        super().__init__("torch (rlloom cpu_compat)")
        self.cuda = _CpuCuda()
        for name in FACTORIES:
            setattr(self, name, _on_cpu(getattr(torch, name)))

    def __getattr__(self, name: str):
        return getattr(torch, name)


class _CudaTypeNames(TorchFunctionMode):
    """``Tensor.type()`` (no argument) of a CPU tensor answers its CUDA twin's name
    (``torch.FloatTensor`` → ``torch.cuda.FloatTensor``); every other call is unchanged."""

    def __torch_function__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        if func is torch.Tensor.type and len(args) == 1 and not kwargs:
            name = func(*args)
            return name if name.startswith("torch.cuda.") else name.replace("torch.", "torch.cuda.", 1)
        return func(*args, **kwargs)


def _cpu_rng_state(*args, **kwargs) -> torch.Tensor:
    return torch.get_rng_state()


def _set_cpu_rng_state(new_state: torch.Tensor, *args, **kwargs) -> None:
    torch.set_rng_state(new_state)


def needed(device: torch.device) -> bool:
    """Whether a Megatron engine on ``device`` needs the layer: it runs on the CPU (whatever the host has)."""
    return torch.device(device).type == "cpu"


def active() -> bool:
    """Whether the redirections are applied now."""
    return bool(_saved_helpers)


def enable() -> None:
    """Apply the redirections (nothing when they already are)."""
    if active():
        return
    cpu_torch = _CpuTorch()
    modules = [importlib.import_module(name) for name in PATCHED_MODULES]
    for module in modules:
        if getattr(module, "torch", None) is not torch:
            raise RuntimeError(f"rlloom-megatron's CPU layer expected {module.__name__} to import torch as `torch`; "
                               f"this megatron-core release changed it: update rlloom_megatron.cpu_compat")
    random = importlib.import_module("megatron.core.tensor_parallel.random")
    for helper in RNG_HELPERS:
        if not callable(getattr(random, helper, None)):
            raise RuntimeError(f"rlloom-megatron's CPU layer expected megatron.core.tensor_parallel.random."
                               f"{helper}; this megatron-core release removed it: update rlloom_megatron.cpu_compat")
    for module in modules:
        module.torch = cpu_torch
    _saved_helpers.update({helper: getattr(random, helper) for helper in RNG_HELPERS})
    random._get_cuda_rng_state = _cpu_rng_state
    random._set_cuda_rng_state = _set_cpu_rng_state


def disable() -> None:
    """Undo :func:`enable`: the listed modules see the real ``torch`` again (nothing when the layer is off)."""
    if not active():
        return
    for name in PATCHED_MODULES:
        importlib.import_module(name).torch = torch
    random = importlib.import_module("megatron.core.tensor_parallel.random")
    for helper, original in _saved_helpers.items():
        setattr(random, helper, original)
    _saved_helpers.clear()


@contextlib.contextmanager
def cuda_type_names() -> Iterator[None]:
    """While the layer is active, a block in which ``Tensor.type()`` names CPU tensors as CUDA ones,
    so that megatron-core's optimizers accept the CPU float32 parameters (they check
    ``param.type() == "torch.cuda.FloatTensor"``); without the layer, an empty block."""
    if not active():
        yield
        return
    with _CudaTypeNames():
        yield
