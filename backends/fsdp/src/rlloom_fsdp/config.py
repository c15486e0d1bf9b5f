"""``FSDPConfig``: the typed config of ``train_engine=fsdp`` (a Hydra structured config)."""

from __future__ import annotations

from dataclasses import dataclass, field

from rlloom.devices import DTYPE_CHOICES, check_device_name

LR_SCHEDULES = ("constant", "cosine")


@dataclass
class FSDPConfig:
    """Optimiser, LR schedule, micro-batching and sharding of the FSDP2 train engine.

    Optimiser (trainable roles ``actor`` and ``critic``): AdamW with ``lr``, ``weight_decay``,
    ``betas``, ``eps``. ``critic_lr``: the critic's base LR (``None``: ``lr``); verl's PPO recipes
    usually give the critic a larger LR than the actor (e.g. 1e-5 vs 1e-6), as a fresh value head
    has to catch up with a pretrained policy. Both follow the same schedule.
    ``grad_clip``: max global L2 norm of the gradients; 0 disables clipping (the norm is still
    reported). LR schedule: see :func:`rlloom_fsdp.schedule.lr_factor` (``warmup_steps`` of linear
    warm-up, then ``constant`` or ``cosine`` decay to ``min_lr_ratio * lr`` over the run's
    ``EngineSpec.total_train_steps``).

    ``micro_batch_size``: rows per forward/backward in ``train_step``; ``log_prob_micro_batch_size``:
    rows per forward in ``compute_log_probs`` (``None``: same as ``micro_batch_size``).
    ``gradient_checkpointing``: recompute decoder-layer activations in backward (less memory, about
    one more forward of compute). ``reshard_after_forward``: free the gathered parameters of each
    decoder layer after its forward (FSDP2's ZeRO-3 behaviour; ``False`` keeps them until backward,
    like ZeRO-2). ``train_entropy``: also hand ``outputs["entropy"]`` (with grad) to the loss
    function in ``train_step``; it keeps one more [b, R, V] tensor for backward, so turn it off for
    large vocabularies when the loss does not use entropy. ``share_prompt_prefix``: rows of a
    micro-batch that share a prompt (the n responses of a group) run the prompt once and their
    responses on its KV cache (:mod:`rlloom_fsdp.prefix`); same numbers, fewer tokens. It falls back
    to the plain forward when no prompt repeats or when gradient checkpointing disables the cache.

    ``device``: where the engine runs (``cpu``, ``cuda``, ``cuda:N``, ``auto``); ``None`` follows
    the run's ``trainer.device``. ``dtype``: the compute dtype of forward and backward (``auto``:
    bfloat16 on CUDA, float32 on CPU; ``float32``, ``bfloat16``, ``float16``); master weights,
    gradient reduction and optimizer state are float32 whatever it is. ``head_chunk_rows``: response
    tokens per chunk of the LM head in the log-prob and entropy computation
    (:func:`rlloom.head.chunked_log_probs`; 0: :func:`rlloom.head.default_chunk_rows`).
    """

    lr: float = 1e-5  # verl uses 1e-6 for >= 0.5B models; small models on CPU learn faster with 1e-5
    critic_lr: float | None = None
    weight_decay: float = 0.01
    betas: list[float] = field(default_factory=lambda: [0.9, 0.999])
    eps: float = 1e-8
    grad_clip: float = 1.0
    warmup_steps: int = 0
    lr_schedule: str = "constant"
    min_lr_ratio: float = 0.0
    micro_batch_size: int = 16
    log_prob_micro_batch_size: int | None = None
    gradient_checkpointing: bool = False
    reshard_after_forward: bool = True
    train_entropy: bool = True
    share_prompt_prefix: bool = True
    device: str | None = None
    dtype: str = "auto"
    head_chunk_rows: int = 0

    def __post_init__(self) -> None:
        if self.lr_schedule not in LR_SCHEDULES:
            raise ValueError(
                f"FSDPConfig.lr_schedule must be one of {list(LR_SCHEDULES)}, got {self.lr_schedule!r}"
            )
        if self.lr < 0:
            raise ValueError(f"FSDPConfig.lr must be >= 0, got {self.lr}")
        if self.critic_lr is not None and self.critic_lr < 0:
            raise ValueError(f"FSDPConfig.critic_lr must be >= 0 or None (= lr), got {self.critic_lr}")
        if self.weight_decay < 0:
            raise ValueError(f"FSDPConfig.weight_decay must be >= 0, got {self.weight_decay}")
        if len(self.betas) != 2 or not all(0.0 <= beta < 1.0 for beta in self.betas):
            raise ValueError(f"FSDPConfig.betas must be two values in [0, 1), got {list(self.betas)}")
        if self.eps <= 0:
            raise ValueError(f"FSDPConfig.eps must be > 0, got {self.eps}")
        if self.grad_clip < 0:
            raise ValueError(f"FSDPConfig.grad_clip must be >= 0 (0 disables clipping), got {self.grad_clip}")
        if self.warmup_steps < 0:
            raise ValueError(f"FSDPConfig.warmup_steps must be >= 0, got {self.warmup_steps}")
        if not 0.0 <= self.min_lr_ratio <= 1.0:
            raise ValueError(f"FSDPConfig.min_lr_ratio must be in [0, 1], got {self.min_lr_ratio}")
        if self.micro_batch_size < 1:
            raise ValueError(f"FSDPConfig.micro_batch_size must be >= 1, got {self.micro_batch_size}")
        if self.device is not None:
            check_device_name("train_engine.device", self.device)
        if self.dtype not in DTYPE_CHOICES:
            raise ValueError(f"FSDPConfig.dtype must be one of {list(DTYPE_CHOICES)}, got {self.dtype!r}")
        if self.head_chunk_rows < 0:
            raise ValueError(f"FSDPConfig.head_chunk_rows must be >= 0 (0: automatic), got {self.head_chunk_rows}")
        if self.log_prob_micro_batch_size is not None and self.log_prob_micro_batch_size < 1:
            raise ValueError(
                f"FSDPConfig.log_prob_micro_batch_size must be >= 1 or None, got {self.log_prob_micro_batch_size}"
            )
