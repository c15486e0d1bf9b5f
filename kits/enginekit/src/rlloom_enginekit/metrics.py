"""Summing a loss function's metrics over micro-batches without a host read per micro-batch.

A loss function returns its metrics as floats or 0-d tensors (:data:`rlloom.protocols.LossFn`).
Reading a GPU tensor back (``float(value)``) makes the host wait for the device, so a train engine
keeps tensor metrics on their device while it loops over micro-batches and reads all of them
together once the step's passes are queued.
"""

from __future__ import annotations

from collections.abc import Mapping

import torch


def add_metrics(sums: dict[str, float | torch.Tensor], metrics: Mapping[str, float | torch.Tensor]) -> None:
    """Add one micro-batch's ``metrics`` to ``sums``: a float as a Python float, a tensor (0-d) as a
    float64 tensor on its device, never read back here (float64 sums of float32 values in the same
    order as Python's, so both give the same numbers)."""
    for name, value in metrics.items():
        value = value.detach().double() if isinstance(value, torch.Tensor) else float(value)
        sums[name] = sums.get(name, 0.0) + value


def read_metric_sums(sums: Mapping[str, float | torch.Tensor], names: list[str]) -> list[float]:
    """The sums of ``names`` as floats; those held as tensors read back together (one host sync)."""
    held = [name for name in names if isinstance(sums[name], torch.Tensor)]
    read = dict(zip(held, torch.stack([sums[name] for name in held]).tolist())) if held else {}
    return [read.get(name, sums[name]) for name in names]
