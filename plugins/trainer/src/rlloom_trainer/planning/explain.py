"""What ``rlloom plan`` prints: the ranked placements that fit, the fastest few layouts explained (per-stage
time, memory per device, what binds), how many were excluded and why, and the winner's overrides."""

from __future__ import annotations

import re
from collections import Counter

from rlloom.errors import ConfigError

from rlloom_trainer.planning.hardware import Cluster
from rlloom_trainer.planning.memory import ModelShape
from rlloom_trainer.planning.profile import Profile
from rlloom_trainer.planning.rates import plan_rates, plan_workload
from rlloom_trainer.planning.search import nothing_fits_message, on_gpu, overrides, rank
from rlloom_trainer.planning.steptime import Prediction

MASK_SHARE = 0.1
"""The share of a train pool's memory from which a placement's explanation names sdpa's packing mask."""


def explain(index: int, prediction: Prediction, device_bytes: float) -> list[str]:
    """One placement: its rank, step time, layout, stages, memory per device (with sdpa's packing mask
    when it is at least :data:`MASK_SHARE` of its pool's) and what binds."""
    stages = ", ".join(f"{name} {seconds:.3g} s" for name, seconds in prediction.stages.items() if seconds > 0)
    memory = ", ".join(f"{pool} {used / 1e9:.2f} GB ({used / device_bytes:.0%})"
                       for pool, used in prediction.memory.items())
    train = prediction.memory.get("train pool", prediction.memory.get("colocated pool", 0.0))
    if prediction.mask_bytes and prediction.mask_bytes >= MASK_SHARE * train:
        memory += (f", of it sdpa's packing mask {prediction.mask_bytes / 1e9:.2f} GB (train_engine.attention=varlen "
                   "builds none)")
    return [f"{index}. {prediction.step_s:.3g} s/step  {prediction.placement.describe()}",
            f"   stages: {stages}", f"   memory per device: {memory}", f"   binds: {prediction.binds}"]


def parameters(count: int) -> str:
    """``7.62B parameters``, ``494M parameters``, ``98,816 parameters``."""
    for scale, suffix in ((1e9, "B"), (1e6, "M")):
        if count >= scale:
            return f"{count / scale:.3g}{suffix} parameters"
    return f"{count:,} parameters"


def distinct_layouts(fits: list[Prediction]) -> list[Prediction]:
    """The fastest of each layout (pools, SP, TP, offload) in ranked order: the micro-batch budget and
    checkpointing only tune a layout."""
    seen, out = set(), []
    for prediction in fits:
        placement = prediction.placement
        layout = (placement.train_devices, placement.rollout_devices, placement.sequence_parallel,
                  placement.train_tensor_parallel, placement.rollout_tensor_parallel, placement.offload)
        if layout not in seen:
            seen.add(layout)
            out.append(prediction)
    return out


def plan_report(resolved, keys: set[str], cluster: Cluster, shape: ModelShape, profile: Profile | None,
                prompt_tokens: float, top: int) -> tuple[str, list[str]]:
    """(the report, the winner's overrides) for the config ``resolved`` on ``cluster``; a ConfigError
    saying what would fit when nothing does."""
    workload = plan_workload(resolved, shape, profile, prompt_tokens, on_gpu(cluster))
    rates = plan_rates(shape, cluster, profile)
    async_mode = resolved.sections["trainer"].async_mode
    fits, excluded = rank(shape, workload, rates, cluster, keys, async_mode)
    if not fits:
        raise ConfigError(nothing_fits_message(excluded, shape, workload, cluster))
    device = cluster.device
    lines = [f"cluster: {cluster.nodes}x{cluster.devices_per_node}x{device.name} ({device.memory_bytes / 1e9:.0f} GB "
             f"each); model: {parameters(shape.params())}; step: {workload.rows} rows of "
             f"{workload.prompt_tokens:.0f} + {workload.response_tokens:.0f} tokens; async_mode={async_mode}",
             f"rates: {rates.source}", f"{len(fits)} placements fit, {len(excluded)} excluded"]
    reasons = Counter(re.sub(r" needs [\d.]+ GB per device, over [^;]*", " over its memory", prediction.excluded)
                      for prediction in excluded)
    lines += [f"  excluded {count}x: {reason}" for reason, count in reasons.most_common(3)]
    for index, prediction in enumerate(distinct_layouts(fits)[:top], start=1):
        lines += explain(index, prediction, device.memory_bytes)
    return "\n".join(lines), overrides(fits[0].placement, keys, gpu=on_gpu(cluster))
