"""Config schema of the ``hf`` rollout engine (option ``rollout=hf``)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from rlloom.choices import check_device_name
from rlloom.config.limits import Limited
from rlloom_enginekit.choices import DTYPE_CHOICES

DECODE_MODES = ("auto", "eager", "static", "graphs")
SLEEP_LEVELS = (0, 1, 2)


@dataclass
class HFRolloutConfig(Limited):
    """How the ``hf`` rollout engine loads its model and batches generation.

    - ``max_batch_rows``: most response rows decoded together in one KV-cache loop; a
      ``generate`` call of ``B * n`` rows runs in ``ceil(B * n / max_batch_rows)`` chunks.
    - ``device``: where the model runs (``cpu``, ``cuda``, ``cuda:N``, ``auto``); ``None`` follows
      the run's ``trainer.device``. A plain ``cuda`` is this rank's GPU (``LOCAL_RANK`` under
      torchrun, else the current one). Results are returned on the CPU.
    - ``dtype``: weight and activation dtype: ``auto`` (bfloat16 on CUDA, float32 on CPU, where the
      half types are many times slower), ``float32``, ``bfloat16``, ``float16``. Sampling math and
      the reported log-probs are float32 whatever this is, from float32 logits (the LM head sums
      in float32 and does not round to ``dtype``, as the FSDP trainer's head).
    - ``decode``: the decoding loop. ``eager``: a dynamic KV cache, one model call per token
      (:mod:`rlloom_hf.decode`); ``static``: preallocated caches in bucketed shapes
      (:mod:`rlloom_hf.static_decode`), token draws from counter-based streams; ``graphs``:
      ``static`` with each bucket's decode step captured in a CUDA graph (CUDA only); ``auto``:
      ``graphs`` on CUDA, ``eager`` elsewhere and for models the static decoder cannot run (layer
      types other than full and sliding-window attention; ``static``/``graphs`` refuse them).
      ``eager`` and ``static`` sample different (equally distributed) tokens for one seed: they
      draw from different generators.
    - ``max_buckets``: with ``static``/``graphs``, how many bucket shapes (rows rounded up to a
      power of two, prompt + new tokens rounded up to 64) keep their KV cache and captured graph
      between calls; the least recently used is dropped first and rebuilt (a few hundred ms of
      capture) when its shape comes back. A bucket's cache takes
      ``2 · layers · rows · kv_heads · head_dim · length`` elements of ``dtype`` (Qwen2.5-7B in
      bf16, 64 rows x 2048: 7.5 GB), held while the trainer works unless ``sleep_level`` ≥ 1; the
      graphs share one memory pool. Calls of one shape (full chunks of ``max_batch_rows`` rows,
      one ``max_new_tokens``) need one bucket per prompt-length class plus one for a last, partial chunk.
    - ``eos_check_interval``: with ``static``/``graphs``, tokens decoded between two checks whether
      every row has stopped (each check waits for the device); the output does not depend on it.
    - ``sleep_level``: what :meth:`~rlloom_hf.engine.HFRolloutEngine.sleep` frees on an
      accelerator while the trainer works: 0 nothing (fastest: captured graphs stay), 1 the
      static caches and graphs (recaptured at the next ``generate``), 2 that and the weights
      (moved to host memory). On the CPU sleep frees nothing.
    - ``attn_implementation``: the transformers attention backend (``"sdpa"`` or ``"eager"``).
    """

    section: ClassVar[str] = "rollout"
    limits: ClassVar[dict] = {"max_batch_rows": ">= 1", "dtype": DTYPE_CHOICES, "decode": DECODE_MODES,
                              "max_buckets": ">= 1", "eos_check_interval": ">= 1", "sleep_level": SLEEP_LEVELS}

    max_batch_rows: int = 64
    device: str | None = None
    dtype: str = "auto"
    decode: str = "auto"
    max_buckets: int = 4
    eos_check_interval: int = 8
    sleep_level: int = 0
    attn_implementation: str = "sdpa"

    def __post_init__(self) -> None:
        super().__post_init__()
        if self.device is not None:
            check_device_name("rollout.device", self.device)
