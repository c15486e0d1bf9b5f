"""``resharder=safetensors``: weight sync through safetensors files in a local directory.

The train engine's full weights (``TrainEngine.named_weights()``, Hugging Face names) are written
as ``model-00001.safetensors``, ``model-00002.safetensors``, … of at most ``max_shard_mb`` each
(so at most one shard is held in memory), then the rollout engine reloads from the directory:

- an engine with ``load_weights_from_dir(path)`` (e.g. ``rollout=vllm``) reads the files itself,
  possibly in another process or on another host sharing the directory;
- any other engine gets the tensors read back from the files through ``update_weights``.

It is the universal fallback: it needs nothing from either engine beyond the protocols.
"""

from __future__ import annotations

import shutil
import tempfile
import time

from rlloom.protocols import LoadsWeightsFromDir, RolloutEngine, TrainEngine
from rlloom.types import SyncStats
from rlloom_enginekit.safetensors_dir import read_safetensors_dir, write_safetensors_dir

from rlloom_resharders.config import SafetensorsResharderConfig


class SafetensorsResharder:
    """Sync by files; see the module doc. ``SyncStats`` counts the tensors and bytes written, and
    the seconds of writing plus reloading."""

    def __init__(self, cfg: SafetensorsResharderConfig) -> None:
        self.config = cfg

    def sync(self, train: TrainEngine, rollout: RolloutEngine) -> SyncStats:
        start = time.perf_counter()
        directory = self.config.directory or tempfile.mkdtemp(prefix="rlloom-weights-")
        try:
            num_tensors, num_bytes = write_safetensors_dir(
                train.named_weights(), directory, self.config.max_shard_mb * 10**6
            )
            if isinstance(rollout, LoadsWeightsFromDir):
                rollout.load_weights_from_dir(directory)
            else:
                rollout.update_weights(read_safetensors_dir(directory))
        finally:
            if not self.config.keep_files and self.config.directory is None:
                shutil.rmtree(directory, ignore_errors=True)
        return SyncStats(num_tensors, num_bytes, time.perf_counter() - start)
