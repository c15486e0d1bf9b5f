"""rlloom-fsdp: a :class:`~rlloom.protocols.TrainEngine` on PyTorch FSDP2 (``fully_shard``)."""

from rlloom_fsdp.config import FSDPConfig
from rlloom_fsdp.engine import FSDPTrainEngine

__all__ = ["FSDPConfig", "FSDPTrainEngine"]
