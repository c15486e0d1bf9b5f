"""The process group FSDP engines shard over, shared by every engine in the process.

:func:`acquire` uses the default ``torch.distributed`` process group when one exists (world size
N, set up by a launcher such as Ray or torchrun); otherwise it creates a single-rank group
in-process (rendezvous through an in-memory ``HashStore``: no port, and no file left behind when
the process dies): gloo for CPU tensors, plus NCCL for CUDA tensors on a machine with a GPU, whatever
the device of the engine that creates it — engines of both devices may share it (a CPU reference
next to a CUDA actor, created in either order). Every engine
calls :func:`acquire` once and :func:`release` once; the group is destroyed when the last user
releases it, and only if it was created here.
"""

from __future__ import annotations

import torch
import torch.distributed as dist
from torch.distributed.device_mesh import DeviceMesh

_users = 0
_created_here = False  # a group created by this module is alive


def backend_for(cuda_available: bool) -> str:
    """The backend string of a group created here: ``cpu:gloo,cuda:nccl`` where CUDA is available
    (NCCL's communicator is only set up at the first collective on a CUDA tensor), else ``gloo``."""
    return "cpu:gloo,cuda:nccl" if cuda_available else "gloo"


def acquire(device: torch.device) -> DeviceMesh:
    """Count one more user of the default process group (creating it if needed); its 1-D mesh on
    ``device``'s type (every rank uses its current device of that type)."""
    global _users, _created_here
    if not dist.is_initialized():
        dist.init_process_group(backend_for(torch.cuda.is_available()), store=dist.HashStore(), rank=0,
                                world_size=1)
        _created_here = True
    _users += 1
    return DeviceMesh.from_group(dist.group.WORLD, device.type)


def release() -> None:
    """Count one user less; destroy the group if this module created it and nobody uses it."""
    global _users, _created_here
    if _users < 1:
        raise RuntimeError("process_group.release() called more often than acquire()")
    _users -= 1
    if _users == 0 and _created_here:
        if dist.is_initialized():
            dist.destroy_process_group()
        _created_here = False


def users() -> int:
    """How many engines currently hold the group."""
    return _users
