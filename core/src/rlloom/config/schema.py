"""Config schemas owned by the core: the run's root, sampling and trainer settings. Every other section
is a config group whose options' schemas are the dataclasses plugins registered with their components."""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any, ClassVar, Optional

from omegaconf import MISSING

from rlloom.choices import check_device_name
from rlloom.config.limits import Limited

DEFAULT_CHOICES: dict[str, str] = {  # the config groups of a run and the option each selects by default
    "algorithm": "grpo", "rollout": "hf", "train_engine": "fsdp", "resharder": "in_process", "reward": "arithmetic",
    "data": "arithmetic", "model": "smollm2-135m", "launcher": "local", "trainer": "default", "agent": "single_turn",
}


NO_ROLE = "none"
"""The default option of a declared reward role's config group (:mod:`rlloom.config.roles`)."""


@dataclass
class NoRoleConfig:
    """``<role>=none``: the run has no such role."""


@dataclass
class SamplingConfig(Limited):
    """Rollout sampling shared by every rollout engine (the number of samples per prompt is the
    algorithm's ``n``)."""

    section: ClassVar[str] = "sampling"
    limits: ClassVar[dict[str, str]] = {"temperature": "in [0, inf)", "top_p": "in (0, 1]", "max_new_tokens": ">= 1"}

    temperature: float = 1.0  # sampling T; 0: greedy (top_p/top_k ignored)
    top_p: float = 1.0  # nucleus: keep the most likely tokens up to this mass; 1.0: off
    top_k: int = -1  # keep the k most likely tokens; -1: off
    max_new_tokens: int = 16  # response tokens per sample, at most (EOS included)
    ignore_eos: bool = False  # every response runs to max_new_tokens (throughput benchmarks)

    def __post_init__(self) -> None:
        super().__post_init__()
        if self.top_k == 0 or self.top_k < -1:
            raise ValueError(f"sampling.top_k={self.top_k}: must be -1 (off) or >= 1")


@dataclass
class TrainerConfig(Limited):
    """The loop: schedule, validation, outputs. Batch sizes count PROMPTS, not responses. Checked when built
    (``trainer.run_dir`` when the run starts: ``rlloom train`` makes its folder)."""

    section: ClassVar[str] = "trainer"
    limits: ClassVar[dict[str, str]] = {
        **dict.fromkeys(("total_steps", "train_batch_size", "val_n"), ">= 1"),
        **dict.fromkeys(("test_freq", "save_freq", "keep_last_n", "dump_rollouts", "max_nonfinite_steps",
                         "max_staleness"), ">= 0"),
        "seed": "in [0, 4294967295]", "val_temperature": "in [0, inf)",
        "async_mode": ("sync", "one_step_off", "fully_async"), "stale_policy": ("drop", "regenerate"),
    }

    total_steps: int = 15  # training steps (one batch of train_batch_size prompts each)
    train_batch_size: int = 4  # prompts per step; responses per step = train_batch_size * algorithm.n
    seed: int = 0  # the run's randomness: data order and sampling (one seed, one run)
    device: str = "auto"  # auto (CUDA when available), cpu, cuda, cuda:N; every role follows unless its config sets device
    offload_train_engines: bool = False  # move train engines' weights and optimizer state to host memory while generating
    max_prompt_length: int = 256  # prompts with more tokens are dropped (counted in data/prompts_dropped)
    val_before_train: bool = True  # validate before the first step (step 0 of metrics.jsonl)
    test_freq: int = 5  # validate every k steps (0: only before and after training)
    val_n: int = 4  # sampled responses per validation prompt (mean@k, pass@k)
    val_temperature: float = 1.0  # sampling T of validation when not greedy
    val_greedy: bool = True  # also report greedy accuracy
    val_max_prompts: int = 0  # 0: every validation prompt
    run_name: Optional[str] = None  # default: <algorithm>-<data>-<model> (grpo-digits-tiny)
    run_dir: Optional[str] = None  # default: runs/<run_name>; re-running the same command resumes the run in it
    trackers: list[str] = field(default_factory=lambda: ["console", "jsonl"])  # jsonl (metrics.jsonl) is always on
    sleep_rollout: bool = True  # rollout.sleep() while training, wake_up() before generating or syncing
    save_final_model: bool = True  # write the final policy as a Hugging Face folder in run_dir/final_model
    save_freq: int = 0  # checkpoint every k steps (0: only at the end); run_dir/checkpoints/global_step_<k>
    keep_last_n: int = 0  # complete checkpoints kept (0: all)
    resume: str = "auto"  # auto: continue from run_dir's latest complete checkpoint; never; or a checkpoint path
    dump_rollouts: int = 0  # write this many trained samples per step to run_dir/rollouts/step_<k>.jsonl
    max_nonfinite_steps: int = 5  # abort after this many steps in a row with a skipped update (0: never)
    async_mode: str = "sync"  # sync; one_step_off or fully_async: generation overlaps training (docs/async.md)
    max_staleness: int = 2  # fully_async: no trained sample is more than this many policy versions old
    partial_rollout: bool = False  # fully_async: a weight update interrupts the generation in flight (docs/async.md)
    stream_groups: bool = False  # fully_async: a step trains the first finished prompt groups, not its own batch
    stale_policy: str = "drop"  # stream_groups: a group over max_staleness versions old: dropped, or regenerated once

    def __post_init__(self) -> None:
        super().__post_init__()
        check_device_name("trainer.device", self.device)  # a DeviceError is a ValueError


def run_schema(roles: Iterable[str] = ()) -> type:
    """The root of a run's config: ``defaults`` (each group's default option), a section per config group
    of :data:`DEFAULT_CHOICES`, ``sampling``, then a section per declared reward role (``none`` by default)."""
    choices = {**DEFAULT_CHOICES, **dict.fromkeys(roles, NO_ROLE)}
    fields = [("defaults", list[Any], field(default_factory=lambda: [{g: c} for g, c in choices.items()] + ["_self_"])),
              *((group, Any, field(default=MISSING)) for group in DEFAULT_CHOICES),
              ("sampling", SamplingConfig, field(default_factory=SamplingConfig)),
              *((role, Any, field(default=MISSING)) for role in roles)]
    return dataclasses.make_dataclass("RunConfig", fields)


RunConfig = run_schema()
