"""torch.distributed and megatron-core's model-parallel state, shared by every Megatron engine in
the process.

:func:`acquire` points megatron-core at the first engine's device for the process (the current CUDA
device, or on the CPU :mod:`rlloom_megatron.cpu_compat`'s layer, whatever the host has) and refuses
an engine on another device while any engine holds it: megatron-core allocates on
``torch.cuda.current_device()`` and the CPU layer redirects that process-wide, so engines on two
devices would get each other's buffers. Then it uses the default process group when one exists
(set up by a launcher: Ray, torchrun), else creates a single-rank one in-process (an in-memory
``HashStore``: no port, no file left behind; gloo on CPU, ``cpu:gloo,cuda:nccl`` on CUDA); then
megatron-core's groups for the requested tensor-parallel size
(``parallel_state.initialize_model_parallel``) and its model-parallel RNG (seeded with the run
seed). Engines of one process must agree on the TP size. The last
:func:`release` tears down what was created here.
"""

from __future__ import annotations

import torch
import torch.distributed as dist

from rlloom_megatron import cpu_compat

_users = 0
_device: torch.device | None = None  # the device of this process's Megatron engines, while any runs
_created_group_here = False
_initialized_here = False


def acquire(device: torch.device, tensor_parallel_size: int, seed: int) -> None:
    """Count one more user of ``device``; set the process up for it and create the process group and
    Megatron's groups if needed. A RuntimeError if other users hold another device."""
    global _users, _created_group_here
    if _users and device != _device:
        raise RuntimeError(f"a Megatron engine on {device} cannot run beside this process's Megatron engines on "
                           f"{_device}: megatron-core allocates on one device per process (rlloom_megatron.cpu_compat "
                           f"redirects its CUDA calls to the CPU process-wide); run them in separate processes, e.g. "
                           f"give the roles their own Ray workers")
    try:
        if not _users:
            _use_device(device)
        if not dist.is_initialized():
            backend = "cpu:gloo,cuda:nccl" if device.type == "cuda" else "gloo"
            dist.init_process_group(backend, store=dist.HashStore(), rank=0, world_size=1)
            _created_group_here = True
        _check_and_initialize(tensor_parallel_size, seed)
    except BaseException:
        if _users == 0:
            _teardown()
        raise
    _users += 1


def _use_device(device: torch.device) -> None:
    """Point megatron-core at ``device``: make it the current CUDA device, or turn the CPU layer on."""
    global _device
    if device.type == "cuda":
        torch.cuda.set_device(device)
    elif cpu_compat.needed(device):
        cpu_compat.enable()
    _device = device


def _check_and_initialize(tensor_parallel_size: int, seed: int) -> None:
    global _initialized_here
    from megatron.core import parallel_state, tensor_parallel

    world = dist.get_world_size()
    if world % tensor_parallel_size:
        raise ValueError(f"train_engine.tensor_parallel_size={tensor_parallel_size} must divide the number of "
                         f"ranks ({world}); run the train roles on a Ray pool of a multiple of it, e.g. launcher=ray "
                         f"+launcher.resource_pools.global={tensor_parallel_size}")
    if parallel_state.model_parallel_is_initialized():
        current = parallel_state.get_tensor_model_parallel_world_size()
        if current != tensor_parallel_size:
            raise ValueError(f"train_engine.tensor_parallel_size={tensor_parallel_size}, but this process already "
                             f"runs Megatron engines with tensor_parallel_size={current}")
    else:
        parallel_state.initialize_model_parallel(tensor_model_parallel_size=tensor_parallel_size)
        tensor_parallel.model_parallel_cuda_manual_seed(seed)
        _initialized_here = True


def release() -> None:
    """Count one user less; tear down Megatron's groups and the process group when they were
    created here and nobody uses them."""
    global _users
    if _users < 1:
        raise RuntimeError("parallel.release() called more often than acquire()")
    _users -= 1
    if _users:
        return
    _teardown()


def _teardown() -> None:
    """Destroy Megatron's groups and the process group, each only if it was created here; turn the
    CPU layer off and free the device for engines on another."""
    global _created_group_here, _initialized_here, _device
    from megatron.core import parallel_state

    if _initialized_here:
        parallel_state.destroy_model_parallel()
        _initialized_here = False
    if _created_group_here:
        if dist.is_initialized():
            dist.destroy_process_group()
        _created_group_here = False
    cpu_compat.disable()
    _device = None
