"""``resharder=shared``: the rollout engine generates with the train engine's own parameters.

Both engines in one process on one device with one dtype (``launcher=local``, or one Ray worker
holding both roles): each sync points the rollout model's parameters at the train engine's
(:class:`~rlloom.protocols.LendsWeights` → :class:`~rlloom.protocols.BorrowsWeights`), so one copy of
the weights serves both — as TRL's trainer generates with the model it trains. Nothing is copied; the
first sync frees the rollout's own copy, later ones only check that the two still share storage (a
move of either side, e.g. an offload, is mended by the next sync).

The optimizer's in-place updates reach the rollout at once, not at the sync: an algorithm must not
generate while it updates (none in this repository does; the sync after each update marks the point
from which the rollout is on the new weights anyway). ``SyncStats.num_bytes`` counts nothing moved.
"""

from __future__ import annotations

import time
from typing import TYPE_CHECKING

from rlloom.protocols import BorrowsWeights, LendsWeights
from rlloom.types import SyncStats

from rlloom_resharders.config import SharedResharderConfig

if TYPE_CHECKING:
    from rlloom.protocols import RolloutEngine, TrainEngine


class SharedResharder:
    """See the module doc."""

    def __init__(self, cfg: SharedResharderConfig) -> None:
        self.config = cfg
        self.freed_bytes = 0  # the rollout's own weights let go so far

    def sync(self, train: TrainEngine, rollout: RolloutEngine) -> SyncStats:
        if not isinstance(train, LendsWeights):
            raise ValueError(f"resharder=shared: the train engine {type(train).__name__} cannot lend its weights; "
                             "use resharder=in_process")
        if not isinstance(rollout, BorrowsWeights):
            raise ValueError(f"resharder=shared: the rollout engine {type(rollout).__name__} cannot borrow weights "
                             "(rollout=hf can); use resharder=in_process")
        start = time.perf_counter()
        tensors = list(train.live_weights())
        self.freed_bytes += rollout.borrow_weights(tensors)
        largest = max((tensor.numel() * tensor.element_size() for _, tensor in tensors), default=0)
        return SyncStats(len(tensors), 0, time.perf_counter() - start, largest, 0)
