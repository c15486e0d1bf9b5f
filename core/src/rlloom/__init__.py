"""rlloom: plugin-based reinforcement-learning post-training for language models.

Importing this package imports pluggy only: the names below that need torch (``Batch``,
``RewardResult``, ``dispatch``, …) are imported when first used, so the command line can compose and
check a config, and report an error, before torch loads. It never imports ray, vllm, sglang, megatron
or transformers. The training loop and ``rlloom train`` are rlloom-trainer's (:func:`rlloom_trainer.train`).
"""

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
