"""Config schemas of the resharders (``resharder=safetensors``, ``resharder=broadcast``,
``resharder=shared``), importable without torch so the plugin registers cheaply."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Optional

BACKENDS = ("auto", "gloo", "nccl")


@dataclass
class SafetensorsResharderConfig:
    """Weights synced through safetensors files the rollout engine reloads (``resharder=safetensors``).

    - ``directory``: where the files go (kept; the next sync replaces them); None: a fresh
      temporary directory per sync, removed after it unless ``keep_files``.
    - ``keep_files``: keep the temporary directory (debugging).
    - ``max_shard_mb``: most megabytes (10^6 bytes) of tensors per file; a larger single tensor gets
      a file of its own."""

    directory: Optional[str] = None
    keep_files: bool = False
    max_shard_mb: int = 1024

    def __post_init__(self) -> None:
        if self.max_shard_mb < 1:
            raise ValueError(f"resharder.max_shard_mb must be >= 1, got {self.max_shard_mb}")


@dataclass
class BroadcastResharderConfig:
    """Weights broadcast from the trainer to the rollout processes over a torch.distributed group
    (``resharder=broadcast``).

    - ``backend``: ``gloo``, ``nccl`` (tensors go through the current CUDA device), or ``auto``
      (nccl when CUDA is available, else gloo).
    - ``timeout_s``: longest wait for the group to form and for any one broadcast."""

    backend: str = "auto"
    timeout_s: float = 600.0

    def __post_init__(self) -> None:
        if self.backend not in BACKENDS:
            raise ValueError(f"resharder.backend={self.backend!r}: must be one of {', '.join(BACKENDS)}")
        if self.timeout_s <= 0:
            raise ValueError(f"resharder.timeout_s={self.timeout_s}: must be > 0")


@dataclass
class SharedResharderConfig:
    """No knobs: the rollout engine borrows the train engine's parameters (:mod:`rlloom_resharders.shared`)."""
