"""rlloom-resharders: train → rollout weight sync through safetensors files (``resharder=safetensors``)."""

from rlloom_resharders.safetensors_dir import (
    SafetensorsResharder,
    SafetensorsResharderConfig,
    read_safetensors_dir,
    write_safetensors_dir,
)

__all__ = ["SafetensorsResharder", "SafetensorsResharderConfig", "read_safetensors_dir", "write_safetensors_dir"]
