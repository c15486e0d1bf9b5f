"""rlloom-hf: a rollout engine on Hugging Face transformers (``rollout=hf``).

:class:`HFRolloutEngine` samples batched responses with a KV cache; :class:`HFRolloutConfig` is its
config schema. Importing this package does not import transformers.
"""

from rlloom_hf.config import HFRolloutConfig

__all__ = ["HFRolloutConfig", "HFRolloutEngine"]


def __getattr__(name: str):
    if name == "HFRolloutEngine":
        from rlloom_hf.engine import HFRolloutEngine

        return HFRolloutEngine
    raise AttributeError(f"module 'rlloom_hf' has no attribute {name!r}")
