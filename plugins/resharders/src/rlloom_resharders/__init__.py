"""rlloom-resharders: train → rollout weight sync across processes.

- ``resharder=broadcast`` (:mod:`rlloom_resharders.broadcast`): a torch.distributed group of its own
  between the train pool's rank 0 and the rollout ranks; rank 0 broadcasts the weights.
- ``resharder=safetensors`` (:mod:`rlloom_resharders.safetensors_dir`): safetensors files in a
  directory, then reloaded by the rollout engine (the universal fallback).
"""

from rlloom_resharders.broadcast import BroadcastResharder, BroadcastResharderConfig
from rlloom_resharders.safetensors_dir import (
    SafetensorsResharder,
    SafetensorsResharderConfig,
    read_safetensors_dir,
    write_safetensors_dir,
)

__all__ = [
    "BroadcastResharder",
    "BroadcastResharderConfig",
    "SafetensorsResharder",
    "SafetensorsResharderConfig",
    "read_safetensors_dir",
    "write_safetensors_dir",
]
