"""Settings every train engine shares (``train_engine.*``: optimizer, LR schedule, micro-batching,
device and dtype), and the LR schedule as a pure function of the optimizer step.

An engine's config dataclass subclasses :class:`TrainEngineConfig` and adds its own fields; both
``train_engine=fsdp`` and ``train_engine=megatron`` do, so the same keys mean the same thing.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import ClassVar

from rlloom.choices import check_device_name
from rlloom.config.limits import Limited, within
from rlloom_enginekit.choices import DTYPE_CHOICES
from rlloom_enginekit.lora import LoraConfig

LR_SCHEDULES = ("constant", "cosine")


@dataclass
class TrainEngineConfig(Limited):
    """Optimizer, LR schedule, micro-batching, device and dtype of a train engine.

    AdamW with ``lr``, ``weight_decay``, ``betas``, ``eps``. ``critic_lr``: the critic's base LR
    (``None``: ``lr``); verl's PPO recipes usually give the critic a larger LR than the actor
    (e.g. 1e-5 vs 1e-6), as a fresh value head has to catch up with a pretrained policy. Both follow
    the same schedule. ``grad_clip``: max global L2 norm of the gradients; 0 disables clipping (the
    norm is still reported). LR schedule: :func:`lr_factor` (``warmup_steps`` of linear warm-up,
    then ``constant`` or ``cosine`` decay to ``min_lr_ratio * lr`` over the run's
    ``EngineSpec.total_train_steps``).

    ``micro_batch_size``: rows per forward/backward in ``train_step``; ``log_prob_micro_batch_size``:
    rows per forward in ``compute_log_probs`` and ``compute_values`` (``None``: same as
    ``micro_batch_size``). ``max_tokens_per_micro_batch``: when set, every pass cuts its micro-batches
    by real tokens instead (:func:`rlloom_enginekit.packing.micro_batches`: consecutive rows while their
    prompt + response tokens fit the budget, as verl's dynamic batch size), which keeps the work
    and memory of a forward even when response lengths vary; the loss normalisation is global
    either way, so the update does not depend on the cut.
    ``train_entropy``: also hand ``outputs["entropy"]`` (with grad) to the loss function in
    ``train_step`` (it costs memory in backward; turn it off when the loss does not use entropy).
    ``gradient_checkpointing``: keep only each decoder layer's input in the training forward and
    recompute the layer in backward (less memory, about one more forward of compute; the step is
    the same).

    ``device``: where the engine runs (``cpu``, ``cuda``, ``cuda:N``, ``auto``); ``None`` follows
    the run's ``trainer.device``. ``dtype``: the compute dtype of forward and backward (``auto``:
    bfloat16 on CUDA, float32 on CPU; ``float32``, ``bfloat16``, ``float16``); master weights and
    optimizer state are float32 whatever it is.

    ``lora``: LoRA adapters in place of full fine-tuning (:class:`rlloom_enginekit.lora.LoraConfig`; ``rank``
    0, the default, is off). An engine class that takes them sets ``lora_refusal`` to ``""``; any other
    refuses ``lora.rank > 0`` when its config is built, giving its ``lora_refusal`` as the reason.

    Errors name the subclass's field (``FSDPConfig.lr …``).
    """

    section: ClassVar[str] = "train_engine"
    limits: ClassVar[dict] = {
        "lr_schedule": LR_SCHEDULES, "lr": "in [0, inf)", "critic_lr": "in [0, inf)", "weight_decay": "in [0, inf)",
        "eps": "in (0, inf)", "grad_clip": "in [0, inf)", "warmup_steps": ">= 0", "min_lr_ratio": "in [0, 1]",
        "micro_batch_size": ">= 1", "log_prob_micro_batch_size": ">= 1", "max_tokens_per_micro_batch": ">= 1",
        "dtype": DTYPE_CHOICES,
    }
    lora_refusal: ClassVar[str] = "this train engine has no LoRA support"

    lr: float = 1e-5  # verl uses 1e-6 for >= 0.5B models; small models on CPU learn faster with 1e-5
    critic_lr: float | None = None  # the critic's base LR; None: lr (both follow one schedule)
    weight_decay: float = 0.01  # AdamW's decoupled weight decay
    betas: list[float] = field(default_factory=lambda: [0.9, 0.999])  # AdamW's (beta1, beta2)
    eps: float = 1e-8  # AdamW's epsilon
    grad_clip: float = 1.0  # max global L2 norm of the gradients; 0: no clipping (the norm is still logged)
    warmup_steps: int = 0  # optimizer steps of linear LR warm-up
    lr_schedule: str = "constant"  # after warm-up: constant, or cosine decay to min_lr_ratio * lr over the run
    min_lr_ratio: float = 0.0  # the cosine schedule's floor, as a fraction of lr
    micro_batch_size: int = 16  # rows (responses) per forward/backward in train_step, per rank
    log_prob_micro_batch_size: int | None = None  # rows per log-prob/value forward; None: micro_batch_size
    max_tokens_per_micro_batch: int | None = None  # set: cut micro-batches by tokens, not rows (per rank)
    train_entropy: bool = True  # hand the loss outputs["entropy"] with grad (costs memory in backward)
    gradient_checkpointing: bool = False  # recompute each decoder layer in backward: less memory, ~1 more forward
    device: str | None = None  # cpu, cuda, cuda:N, auto; None: trainer.device
    dtype: str = "auto"  # compute dtype: auto (bf16 on CUDA, fp32 on CPU), float32, bfloat16, float16
    lora: LoraConfig = field(default_factory=LoraConfig)

    def __post_init__(self) -> None:
        super().__post_init__()
        if self.lora.enabled and self.lora_refusal:
            raise ValueError(f"train_engine.lora.rank={self.lora.rank}: {self.lora_refusal}; set "
                             "train_engine.lora.rank=0 or use train_engine=fsdp")
        if len(self.betas) != 2 or not all(within(beta, "in [0, 1)") for beta in self.betas):
            raise ValueError(f"train_engine.betas={list(self.betas)}: must be two values in [0, 1)")
        if self.device is not None:
            check_device_name("train_engine.device", self.device)

    def base_lr(self, role: str) -> float:
        """The base LR of ``role``: ``critic_lr`` for a critic when set, else ``lr``."""
        return self.critic_lr if role == "critic" and self.critic_lr is not None else self.lr

    def lr_at(self, step: int, role: str, total_steps: int) -> float:
        """The LR of optimizer step ``step`` (1-based) of ``role`` in a run of ``total_steps``."""
        factor = lr_factor(step, schedule=self.lr_schedule, warmup_steps=self.warmup_steps,
                           total_steps=total_steps, min_lr_ratio=self.min_lr_ratio)
        return self.base_lr(role) * factor


def lr_factor(step: int, *, schedule: str, warmup_steps: int, total_steps: int, min_lr_ratio: float) -> float:
    """Multiplier of the base LR for optimizer step ``step`` (1-based: the first step is 1).

    Warm-up: ``step / warmup_steps`` while ``step <= warmup_steps`` (no step runs at LR 0; the
    last warm-up step reaches the full LR). After warm-up:

    - ``constant``: 1.
    - ``cosine``: ``min_lr_ratio + (1 - min_lr_ratio) * (1 + cos(pi * p)) / 2`` with progress
      ``p = (step - 1 - warmup_steps) / (total_steps - warmup_steps)`` clamped to [0, 1], so the
      first step after warm-up uses the full LR and steps past ``total_steps`` stay at the floor.
      Needs ``total_steps > warmup_steps``.
    """
    if step < 1:
        raise ValueError(f"lr_factor: step is 1-based, got {step}")
    if step <= warmup_steps:
        return step / warmup_steps
    if schedule == "constant":
        return 1.0
    if schedule == "cosine":
        if total_steps <= warmup_steps:
            raise ValueError(
                f"lr_schedule='cosine' needs total_steps > warmup_steps, got total_steps={total_steps} "
                f"and warmup_steps={warmup_steps}"
            )
        progress = min(1.0, (step - 1 - warmup_steps) / (total_steps - warmup_steps))
        return min_lr_ratio + (1.0 - min_lr_ratio) * 0.5 * (1.0 + math.cos(math.pi * progress))
    raise ValueError(f"unknown lr_schedule {schedule!r}; choose one of {list(LR_SCHEDULES)}")
