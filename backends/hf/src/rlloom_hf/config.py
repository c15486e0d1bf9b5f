"""Config schema of the ``hf`` rollout engine (option ``rollout=hf``)."""

from __future__ import annotations

from dataclasses import dataclass

import torch

DTYPES: dict[str, torch.dtype] = {
    "float32": torch.float32,
    "bfloat16": torch.bfloat16,
    "float16": torch.float16,
}


@dataclass
class HFRolloutConfig:
    """How the ``hf`` rollout engine loads its model and batches generation.

    - ``max_batch_rows``: most response rows decoded together in one KV-cache loop; a
      ``generate`` call of ``B * n`` rows runs in ``ceil(B * n / max_batch_rows)`` chunks.
    - ``dtype``: weight and activation dtype, one of ``float32``, ``bfloat16``, ``float16``
      (on CPU keep ``float32``: the half types are many times slower there). Sampling math and the
      reported log-probs are float32 whatever this is.
    - ``device``: where the model runs (``"cpu"``, ``"cuda"``, ``"cuda:1"``, …). Results are
      returned on the CPU.
    - ``attn_implementation``: the transformers attention backend (``"sdpa"`` or ``"eager"``).
    """

    max_batch_rows: int = 64
    dtype: str = "float32"
    device: str = "cpu"
    attn_implementation: str = "sdpa"

    def __post_init__(self) -> None:
        if self.max_batch_rows < 1:
            raise ValueError(f"HFRolloutConfig.max_batch_rows must be >= 1, got {self.max_batch_rows}")
        if self.dtype not in DTYPES:
            raise ValueError(f"HFRolloutConfig.dtype must be one of {sorted(DTYPES)}, got {self.dtype!r}")

    @property
    def torch_dtype(self) -> torch.dtype:
        return DTYPES[self.dtype]
