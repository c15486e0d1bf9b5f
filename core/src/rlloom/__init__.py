"""rlloom: plugin-based reinforcement-learning post-training for language models.

Importing this package is cheap: it never imports ray, vllm, sglang, megatron or transformers.
"""

from rlloom.batch import Batch, BatchError
from rlloom.controller.dispatch import dispatch
from rlloom.plugins.hookspecs import hookimpl
from rlloom.types import Completion, EngineSpec, MiniBatchStats, RewardResult, SamplingParams, SyncStats

__version__ = "0.1.0"

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
