"""The valid values of the engine settings that several engines' configs share; importable without
torch, so composing and checking a config never waits for torch to load."""

from __future__ import annotations

LAYOUTS = ("shared_prompt", "packed", "padded")
"""``train_engine.sequence_layout`` choices: :func:`rlloom_enginekit.packing.pack_rows`'s two layouts, and the
padded ``[B, P + R]`` batch (:func:`rlloom_enginekit.sequences.concat_prompt_response`)."""

GROUP_WIDTH = 4096
"""Tokens of one prompt and its responses beyond which :func:`rlloom_enginekit.packing.pack_rows` splits the
group into several units (the attention mask of a pack costs W² elements; ``rlloom plan`` sizes that mask)."""

DTYPE_CHOICES = ("auto", "float32", "bfloat16", "float16")
"""Parameter dtype settings (``auto``: bf16 on CUDA, float32 on CPU; :func:`rlloom_enginekit.devices.resolve_dtype`)."""
