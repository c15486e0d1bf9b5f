"""How many CPU threads each rlloom process computes with: the one place that sets them.

Torch runs its CPU kernels on an OpenMP pool of ``torch.get_num_threads()`` threads that spin
while they wait. Two processes whose pools together exceed the cores they share do not just split
the machine: their spinning threads preempt each other, and a step can take several times as long
(docs/placement.md has the measurement). So every process rlloom starts sizes its pool from its
placement: the local launcher's one process takes the cores it may run on, a Ray worker the CPUs
its placement-group bundle reserves (``launcher.cpus_per_worker``); an explicit count overrides
either, and so does ``OMP_NUM_THREADS`` in the environment when no count is given.
"""

from __future__ import annotations

import os


ENVIRONMENT = "OMP_NUM_THREADS"


def available_cores() -> int:
    """Cores this process may run on (its CPU affinity; the CPU count where affinity is unknown)."""
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # not on Linux
        return os.cpu_count() or 1


def threads_for(requested: int, placed_cores: float) -> int:
    """The thread count of a process: ``requested`` when > 0; else ``OMP_NUM_THREADS`` when the
    environment sets it; else the ``placed_cores`` its placement gives it, at least 1."""
    if requested > 0:
        return requested
    from_environment = os.environ.get(ENVIRONMENT, "")
    if from_environment.isdigit() and int(from_environment) > 0:
        return int(from_environment)
    return max(1, int(placed_cores))


def use_threads(count: int) -> None:
    """Size this process's torch (OpenMP) pool to ``count`` threads."""
    import torch  # here, so that building a launcher's config does not import torch

    torch.set_num_threads(count)
