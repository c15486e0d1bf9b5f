"""rlloom: plugin-based reinforcement-learning post-training for language models. Importing it imports pluggy
only: the names below that need torch are imported when first used, so a config error is reported before
torch loads (never ray, vllm, sglang, megatron or transformers). The training loop is rlloom-trainer's."""

from rlloom.lazy import lazy_exports
from rlloom.plugins.hookspecs import hookimpl

__version__ = "0.1.0"

__getattr__ = lazy_exports(__name__, {
    "Batch": ".batch",
    "BatchError": ".batch",
    "dispatch": ".controller.dispatch",
    **{name: ".types" for name in (
        "Completion", "EngineSpec", "MiniBatchStats", "RewardResult", "SamplingParams", "SyncStats")},
})

__all__ = ["Batch", "BatchError", "Completion", "EngineSpec", "MiniBatchStats", "RewardResult", "SamplingParams",
           "SyncStats", "dispatch", "hookimpl"]
