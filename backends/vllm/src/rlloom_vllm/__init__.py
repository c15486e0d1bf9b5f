"""rlloom-vllm: a rollout engine on vLLM's offline engine (``rollout=vllm``).

:class:`VLLMRolloutEngine` generates from token ids and reloads weights in place;
:class:`VLLMRolloutConfig` is its config schema. Importing this package does not import vLLM.
"""

from rlloom_vllm.config import VLLMRolloutConfig

__all__ = ["VLLMRolloutConfig", "VLLMRolloutEngine"]


def __getattr__(name: str):
    if name == "VLLMRolloutEngine":
        from rlloom_vllm.engine import VLLMRolloutEngine

        return VLLMRolloutEngine
    raise AttributeError(f"module 'rlloom_vllm' has no attribute {name!r}")
