"""rlloom-resharders: train → rollout weight sync across processes.

- ``resharder=broadcast`` (:mod:`rlloom_resharders.broadcast`): a torch.distributed group of its own
  between the train pool's rank 0 and the rollout ranks; rank 0 broadcasts the weights.
- ``resharder=safetensors`` (:mod:`rlloom_resharders.safetensors_dir`): safetensors files in a
  directory, then reloaded by the rollout engine (the universal fallback).
"""

from rlloom.lazy import lazy_exports

__all__ = [
    "BroadcastResharder",
    "BroadcastResharderConfig",
    "SafetensorsResharder",
    "SafetensorsResharderConfig",
]

__getattr__ = lazy_exports(__name__, {  # imported on first use: the plugin registers without torch
    "BroadcastResharder": ".broadcast",
    "BroadcastResharderConfig": ".broadcast",
    "SafetensorsResharder": ".safetensors_dir",
    "SafetensorsResharderConfig": ".safetensors_dir",
})
