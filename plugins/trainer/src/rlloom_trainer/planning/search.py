"""The placements ``rlloom plan`` tries, their ranking, and the winner as Hydra overrides.

Candidates on a cluster of D devices: colocated on W devices and split pools of W train + G rollout
devices (W + G ≤ D), W and G each a power of two or D itself; per pool every SP and TP that divide it and
the heads, for the engines that have the key (``train_engine.sequence_parallel_size``,
``train_engine.tensor_parallel_size``, ``rollout.tp_size``; else 1); the micro-batch token budgets of
:data:`MICRO_BATCH_TOKENS`; gradient checkpointing when the engine has the key; offload for colocated
pools in ``trainer.async_mode=sync`` on accelerators. The async mode is the config's: the plan never
changes what the algorithm trains on. Ranked by predicted step time, then fewer devices, smaller SP and
TP, no offload, no checkpointing, larger micro-batches."""

from __future__ import annotations

import dataclasses
import itertools
from collections.abc import Iterator

from rlloom_trainer.planning.hardware import Cluster
from rlloom_trainer.planning.memory import ModelShape
from rlloom_trainer.planning.steptime import (
    MASK_ADVICE,
    MEMORY_FRACTION,
    Placement,
    Prediction,
    Rates,
    Workload,
    memory_per_device,
    predict,
)

MICRO_BATCH_TOKENS = (2048, 4096, 8192, 16384, 32768)


def pool_sizes(devices: int) -> list[int]:
    """1, 2, 4, … up to ``devices``, and ``devices`` itself."""
    sizes = {devices}
    size = 1
    while size < devices:
        sizes.add(size)
        size *= 2
    return sorted(sizes)


def divisors(size: int, heads: int, kv_heads: int) -> list[int]:
    """The parallel sizes that divide a pool of ``size`` and both head counts."""
    return [k for k in range(1, size + 1) if size % k == 0 and heads % k == 0 and kv_heads % k == 0]


def on_gpu(cluster: Cluster) -> bool:
    """Whether the cluster's devices are accelerators (a ``cpu`` device has no host memory to offload to)."""
    return cluster.device.name.lower() != "cpu"


def candidates(cluster: Cluster, shape: ModelShape, keys: set[str], async_mode: str) -> Iterator[Placement]:
    """Every placement of the module docstring; ``keys``: the config's dotted keys (what the engines have)."""
    sizes = pool_sizes(cluster.devices)
    pools = [(train, 0) for train in sizes] * (async_mode == "sync")
    pools += [(train, gen) for train in sizes for gen in sizes if train + gen <= cluster.devices]
    has = keys.__contains__
    budgets = MICRO_BATCH_TOKENS
    checkpointing = (False, True) if has("train_engine.gradient_checkpointing") else (False,)
    for train, gen in pools:
        sp_sizes = divisors(train, shape.heads, shape.kv_heads) if has("train_engine.sequence_parallel_size") else [1]
        tp_sizes = divisors(train, shape.heads, shape.kv_heads) if has("train_engine.tensor_parallel_size") else [1]
        rollout_tp = divisors(gen or train, shape.heads, shape.kv_heads) if has("rollout.tp_size") else [1]
        offload = (False, True) if gen == 0 and async_mode == "sync" and on_gpu(cluster) else (False,)
        for sp, tp, rtp, budget, ckpt, off in itertools.product(sp_sizes, tp_sizes, rollout_tp, budgets,
                                                               checkpointing, offload):
            if train % (sp * tp) == 0:
                yield Placement(train, gen, sp, tp, rtp, budget, off, ckpt)


def rank(shape: ModelShape, workload: Workload, rates: Rates, cluster: Cluster, keys: set[str],
         async_mode: str) -> tuple[list[Prediction], list[Prediction]]:
    """(placements that fit, fastest first; those excluded, each with its reason)."""
    predictions = [predict(placement, shape, workload, rates, cluster, async_mode)
                   for placement in candidates(cluster, shape, keys, async_mode)]
    fits = sorted((p for p in predictions if not p.excluded),
                  key=lambda p: (round(p.step_s, 9), p.placement.devices, p.placement.sequence_parallel,
                                 p.placement.train_tensor_parallel, p.placement.rollout_tensor_parallel,
                                 p.placement.offload, p.placement.checkpointing, -p.placement.micro_batch_tokens))
    return fits, [p for p in predictions if p.excluded]


def overrides(placement: Placement, keys: set[str], gpu: bool) -> list[str]:
    """``rlloom train`` overrides that run ``placement`` under ``launcher=ray`` (one process a device;
    ``launcher.gpus_per_worker=1`` on GPUs), setting only the keys the config has."""
    out = ["launcher=ray", f"+launcher.resource_pools.global={placement.train_devices}"]
    if not placement.colocated:
        out += [f"+launcher.resource_pools.gen={placement.rollout_devices}", "+launcher.mapping.rollout=gen",
                "resharder=broadcast"]
    if gpu:
        out.append("launcher.gpus_per_worker=1")
    settings = {"train_engine.sequence_parallel_size": placement.sequence_parallel,
                "train_engine.tensor_parallel_size": placement.train_tensor_parallel,
                "rollout.tp_size": placement.rollout_tensor_parallel,
                "train_engine.max_tokens_per_micro_batch": placement.micro_batch_tokens,
                "train_engine.gradient_checkpointing": placement.checkpointing,
                "trainer.offload_train_engines": placement.offload}
    for key, value in settings.items():
        if key in keys:
            out.append(f"{key}={str(value).lower() if isinstance(value, bool) else value}")
    return out


def nothing_fits_message(excluded: list[Prediction], shape: ModelShape, workload: Workload,
                         cluster: Cluster) -> str:
    """Why no placement fits, and what would: the leanest placement's memory per device and the fewest
    devices (doubling, up to 64 times the cluster) over which that layout would fit; when even that
    does not, the rollout's bf16 weights that one device must hold without tensor parallelism. When
    sdpa's packing mask is what does not fit, the leanest placement that fits without it and the key
    that drops it (:data:`.steptime.MASK_ADVICE`)."""
    with_memory = [p for p in excluded if p.memory]
    if not with_memory:
        return f"no placement fits {cluster.devices}x{cluster.device.name}: {excluded[0].excluded}"
    least = min(with_memory, key=lambda p: max(p.memory.values()))
    need = max(least.memory.values())
    limit = MEMORY_FRACTION * cluster.device.memory_bytes
    message = (f"no placement of a {shape.params() / 1e9:.2f}B-parameter model fits {cluster.devices}x"
               f"{cluster.device.name} ({cluster.device.memory_bytes / 1e9:.0f} GB each): the leanest, "
               f"{least.placement.describe()}, needs {need / 1e9:.1f} GB per device")
    masked = [p for p in with_memory if p.excluded.endswith(MASK_ADVICE)]
    if masked:
        lean = min(masked, key=lambda p: max(p.memory.values()) - p.mask_bytes)
        return (f"{message}; {lean.placement.describe()} fits but for sdpa's packing mask "
                f"({lean.mask_bytes / 1e9:.1f} GB per device): train_engine.attention=varlen builds none")
    placement = least.placement
    for _ in range(6):
        placement = dataclasses.replace(placement, train_devices=placement.train_devices * 2,
                                        rollout_devices=placement.rollout_devices * 2)
        if max(memory_per_device(placement, shape, workload).values()) <= limit:
            return f"{message}; it would fit on {placement.devices} such devices ({placement.describe()})"
    weights = 2 * shape.params() / placement.rollout_tensor_parallel
    if weights > limit:
        return (f"{message}; its rollout's bf16 weights alone ({weights / 1e9:.0f} GB) exceed one device: a rollout "
                "engine with tensor parallelism (rollout.tp_size, rollout=sglang) would split them")
    return f"{message}; a device of at least {need / MEMORY_FRACTION / 1e9:.0f} GB or a smaller model would fit"
