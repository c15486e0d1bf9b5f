"""``MegatronConfig``: the typed config of ``train_engine=megatron`` (a Hydra structured config)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from rlloom_enginekit.engine_config import TrainEngineConfig


@dataclass
class MegatronConfig(TrainEngineConfig):
    """The megatron-core train engine: the settings every train engine has (optimizer, LR
    schedule, micro-batching, device, dtype: :class:`rlloom_enginekit.engine_config.TrainEngineConfig`) and
    its parallel layout.

    ``tensor_parallel_size``: ranks each layer's weights are split over (Megatron's TP); the
    engine's ranks (the launcher's world) are TP groups of that size, and the groups split the
    batch (data parallelism). It must divide the world size and the model's numbers of attention
    and key/value heads. Pipeline parallelism is not offered (see docs/megatron.md).

    ``use_distributed_optimizer``: with more than one data-parallel replica, megatron-core's
    ``DistributedOptimizer`` (Megatron-LM's ``--use-distributed-optimizer``, verl's
    ``megatron.use_distributed_optimizer``): gradients are reduce-scattered over the data-parallel
    group and each DP rank keeps AdamW's state for, and updates, its 1/DP share of the parameters,
    which are then all-gathered (ZeRO stage 1); false: megatron-core's plain optimizer, gradients
    all-reduced and the whole state on every replica. The update is the same either way
    (:mod:`rlloom_megatron.optimizer`).
    """

    limits: ClassVar[dict] = {"tensor_parallel_size": ">= 1"}
    tensor_parallel_size: int = 1  # ranks each layer's weights are split over (Megatron TP); divides the world
    use_distributed_optimizer: bool = True  # shard optimizer state over data-parallel replicas (megatron-core's)

    lora_refusal: ClassVar[str] = (
        "train_engine=megatron cannot take LoRA: megatron-core has no LoRA layers of its own (NVIDIA's live in "
        "NeMo / Megatron-Bridge, not dependencies here) and its tensor-parallel linear layers would need adapters "
        "split to match (docs/lora.md)")

    # A checkpoint loads at any TP size, so one process (``rlloom export``) reads it at TP = 1.
    single_process_overrides: ClassVar[dict] = {"tensor_parallel_size": 1}

