"""rlloom-fsdp: a :class:`~rlloom.protocols.TrainEngine` on PyTorch FSDP2 (``fully_shard``).

:class:`FSDPConfig` is its config schema; :class:`FSDPTrainEngine` (and ``process_group``) are
imported on first use, so registering the plugin does not import transformers.
"""

import importlib

from rlloom_fsdp.config import FSDPConfig

__all__ = ["FSDPConfig", "FSDPTrainEngine", "process_group"]


def __getattr__(name: str):
    if name == "FSDPTrainEngine":
        from rlloom_fsdp.engine import FSDPTrainEngine

        return FSDPTrainEngine
    if name == "process_group":
        return importlib.import_module("rlloom_fsdp.process_group")
    raise AttributeError(f"module 'rlloom_fsdp' has no attribute {name!r}")
