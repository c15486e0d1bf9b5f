"""torch.distributed and megatron-core's model-parallel state, shared by every Megatron engine in
the process.

:func:`acquire` uses the default process group when one exists (set up by a launcher: Ray,
torchrun), else creates a single-rank one in-process (an in-memory ``HashStore``: no port, no file
left behind; gloo on CPU, ``cpu:gloo,cuda:nccl`` on CUDA); then megatron-core's groups for the requested
tensor-parallel size (``parallel_state.initialize_model_parallel``) and its model-parallel RNG
(seeded with the run seed). Engines of one process must agree on the TP size. The last
:func:`release` tears down what was created here.
"""

from __future__ import annotations

import torch
import torch.distributed as dist

_users = 0
_created_group_here = False
_initialized_here = False


def acquire(device: torch.device, tensor_parallel_size: int, seed: int) -> None:
    """Count one more user; create the process group and Megatron's groups if needed."""
    global _users, _created_group_here
    if not dist.is_initialized():
        backend = "cpu:gloo,cuda:nccl" if device.type == "cuda" else "gloo"
        dist.init_process_group(backend, store=dist.HashStore(), rank=0, world_size=1)
        _created_group_here = True
    try:
        _check_and_initialize(tensor_parallel_size, seed)
    except BaseException:
        if _users == 0:
            _teardown()
        raise
    _users += 1


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
    """Destroy Megatron's groups and the process group, each only if it was created here."""
    global _created_group_here, _initialized_here
    from megatron.core import parallel_state

    if _initialized_here:
        parallel_state.destroy_model_parallel()
        _initialized_here = False
    if _created_group_here:
        if dist.is_initialized():
            dist.destroy_process_group()
        _created_group_here = False
