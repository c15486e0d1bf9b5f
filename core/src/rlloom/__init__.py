"""rlloom: plugin-based reinforcement-learning post-training for language models.

Importing this package is cheap: it imports pluggy only. The names below that need torch
(``Batch``, ``RewardResult``, ``dispatch``, …) are imported when first used (``from rlloom import
Batch`` works as usual), so the command line can compose and check a config, and report an error,
before torch loads. It never imports ray, vllm, sglang, megatron or transformers.
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

__all__ = [
    "Batch",
    "BatchError",
    "Completion",
    "EngineSpec",
    "MiniBatchStats",
    "RewardResult",
    "SamplingParams",
    "SyncStats",
    "dispatch",
    "hookimpl",
    "train",
]


def train(overrides: list[str] | None = None) -> dict[str, float]:
    """Run ``rlloom train`` in this process and return the run's final metrics.

    ``overrides`` are the same strings the command line takes (``["preset=tiny", "algorithm=grpo"]``).
    A bad config raises :class:`rlloom.config.ConfigError` with the same message the CLI prints.
    """
    from rlloom.trainer import run_training

    return run_training(list(overrides or []))
