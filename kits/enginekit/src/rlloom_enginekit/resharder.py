"""``resharder=in_process``, the default: weight sync between engines living in the same process."""

from __future__ import annotations

import time
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from typing import TYPE_CHECKING

from rlloom.types import SyncStats

if TYPE_CHECKING:  # this module is imported to register the resharder: keep it free of torch
    import torch

    from rlloom.protocols import RolloutEngine, TrainEngine


@dataclass
class InProcessResharderConfig:
    """No knobs: tensors stream from the train engine straight into the rollout engine."""


class _Counter:
    def __init__(self, tensors: Iterable[tuple[str, torch.Tensor]]) -> None:
        self._tensors = tensors
        self.num_tensors = 0
        self.num_bytes = 0
        self.max_tensor_bytes = 0

    def __iter__(self) -> Iterator[tuple[str, torch.Tensor]]:
        for name, tensor in self._tensors:
            size = tensor.numel() * tensor.element_size()
            self.num_tensors += 1
            self.num_bytes += size
            self.max_tensor_bytes = max(self.max_tensor_bytes, size)
            yield name, tensor


class InProcessResharder:
    """Colocated sync: ``rollout.update_weights(train.named_weights())``, no copy to disk.

    Full tensors stream one at a time, so peak extra memory is one tensor, not a second model.
    """

    def __init__(self, cfg: InProcessResharderConfig) -> None:
        self.config = cfg

    def sync(self, train: TrainEngine, rollout: RolloutEngine) -> SyncStats:
        from rlloom_enginekit.devices import CudaPeak

        start = time.perf_counter()
        counter = _Counter(train.named_weights())
        with CudaPeak() as peak:
            rollout.update_weights(counter)
        return SyncStats(counter.num_tensors, counter.num_bytes, time.perf_counter() - start,
                         counter.max_tensor_bytes, peak.extra_bytes)
