"""The stage costs (:class:`~.steptime.Rates`) and the step's :class:`~.steptime.Workload` a plan uses.

From a profile taken on the cluster's kind of device (its device's name contains the cluster's, or
both are ``cpu``): the profile's rates, the per-token ones (and the weight bytes) scaled by the
parameter ratio of the planned model to the profiled one (the FLOPs of a token are 2 · P per forward),
with the data-parallel efficiencies and the gather bandwidth it measured on a pool twice its own.

Otherwise a roofline on the cluster's device, with P parameters, peak F FLOP/s, memory bandwidth M:

    train     6 · P / (F · TRAIN_MFU) device-seconds a token        (forward and backward)
    log_prob  2 · P / (F · TRAIN_MFU)
    gen       2 · P / (F · GEN_MFU), plus reading the bf16 weights once a decode step: 2 · P / M (over TP)
    sync      1 / M a byte (a device-local copy; between pools :mod:`.steptime` adds the links)

each at ``ROOFLINE_EFFICIENCY`` of perfect sharing per doubling of a pool from one device (the
device-seconds of a unit grow by device_s · (1 / e − 1) a doubling, :class:`~.steptime.StageCost`).
Attention's FLOPs (a few % at these lengths) and every fixed cost are left out: a roofline plan ranks
placements, its absolute times are optimistic until a profile on that device calibrates them.
"""

from __future__ import annotations

import dataclasses

from rlloom_enginekit.choices import GROUP_WIDTH

from rlloom_trainer.planning.hardware import Cluster
from rlloom_trainer.planning.memory import ModelShape
from rlloom_trainer.planning.profile import Profile
from rlloom_trainer.planning.steptime import Rates, StageCost, Workload

TRAIN_MFU = 0.4
"""The share of the bf16 peak a train or log-prob pass reaches (an assumption, typical of FSDP on H100s)."""

GEN_MFU = 0.3
"""The share of the peak generation's token FLOPs reach (an assumption)."""

ROOFLINE_EFFICIENCY = 0.95
"""The share of perfect data-parallel sharing each doubling of a pool keeps without a profile (an
assumption: every collective waits for the slowest rank, and ranks' token shares are balanced only to a
row; FSDP's and the sync's communication are modelled apart, at the link bandwidth)."""


def same_device(profile: Profile, cluster: Cluster) -> bool:
    """Whether ``profile`` was taken on ``cluster``'s kind of device."""
    return cluster.device.name.lower() in profile.device.lower()


def plan_rates(shape: ModelShape, cluster: Cluster, profile: Profile | None) -> Rates:
    """The profile's rates scaled to ``shape`` when it was taken on ``cluster``'s device, else the
    roofline (module docstring)."""
    if profile is not None and same_device(profile, cluster):
        ratio = shape.params() / profile.shape.params()
        rates = profile.rates

        def scaled(cost: StageCost) -> StageCost:
            return dataclasses.replace(cost, device_s=cost.device_s * ratio,
                                       device_growth_s=cost.device_growth_s * ratio)

        return dataclasses.replace(rates, gen=scaled(rates.gen), train=scaled(rates.train),
                                   log_prob=scaled(rates.log_prob), decode_step_s=rates.decode_step_s * ratio,
                                   source=f"profile on {profile.device}; {scaling(profile)}")
    device = cluster.device
    token = 2 * shape.params() / device.bf16_flops

    def cost(device_s: float) -> StageCost:
        return StageCost(0.0, device_s, device_growth_s=device_s * (1 / ROOFLINE_EFFICIENCY - 1))

    rates = Rates(gen=cost(token / GEN_MFU), train=cost(3 * token / TRAIN_MFU), log_prob=cost(token / TRAIN_MFU),
                  sync=StageCost(0.0, 1 / device.memory_bandwidth),
                  decode_step_s=2 * shape.params() / device.memory_bandwidth)
    return dataclasses.replace(rates, source=f"roofline on {device.name} (train MFU {TRAIN_MFU}, generation "
                                             f"{GEN_MFU}, data-parallel efficiency {ROOFLINE_EFFICIENCY}: assumed)")


def scaling(profile: Profile) -> str:
    """What the profile measured on its pools doubled: ``data-parallel efficiency (pools of 1 -> 2, 1 -> 1
    threads a worker): gen 0.6 +0.000 s, train 0.8 +0.100 s, log-probs 1 +0.020 s a call, other +0.010 s;
    weight gather 51 MB/s`` (each stage's efficiency and its fixed part's change)."""
    if not profile.doubled_step_s:
        return "data-parallel efficiency not measured (a launcher without pools): perfect sharing assumed"
    rates = profile.rates

    def seconds(value: float) -> str:
        return f"{round(value, 3) or 0.0:+.3f} s"

    shares = ", ".join(f"{name} {cost.efficiency:.2g} {seconds(cost.growth_s)}" for name, cost in
                       (("gen", rates.gen), ("train", rates.train), ("log-probs", rates.log_prob)))
    gather = f"; weight gather {rates.gather_bandwidth / 1e6:.3g} MB/s" if rates.gather_bandwidth else ""
    pools = f"pools of {profile.devices} -> {2 * profile.devices}"
    if len(profile.threads) == 2:
        pools += f", {' -> '.join(str(count) for _, count in sorted(profile.threads.items()))} threads a worker"
    return f"data-parallel efficiency ({pools}): {shares} a call, other {seconds(rates.other_growth_s)}{gather}"


def plan_workload(resolved, shape: ModelShape, profile: Profile | None, prompt_tokens: float,
                  gpu: bool) -> Workload:
    """The step the config ``resolved`` runs: ``trainer.train_batch_size`` prompts × ``algorithm.n``,
    ``sampling.max_new_tokens``. With a profile, its measured prompt length, its response length scaled
    by the ratio of the two ``max_new_tokens``, its passes and engines, its sync bytes scaled by the
    parameter ratio; without one, ``prompt_tokens``, full-length responses, the passes the algorithm
    asks for (:func:`algorithm_passes`) and bf16 weights. Either way the train engine's packing mask
    (:func:`packing_mask`; ``gpu``: the cluster's devices are accelerators)."""
    sections = resolved.sections
    prompts, n = sections["trainer"].train_batch_size, sections["algorithm"].n
    max_new = sections["sampling"].max_new_tokens
    if profile is not None:
        measured = profile.workload
        response = measured.response_tokens * max_new / measured.max_new_tokens
        sync_bytes = measured.sync_bytes * shape.params() / profile.shape.params()
        workload = Workload(prompts, n, measured.prompt_tokens, response, max_new, measured.log_prob_passes,
                            measured.trains, measured.reference, sync_bytes)
    else:
        passes, trains, reference = algorithm_passes(resolved, prompts)
        workload = Workload(prompts, n, prompt_tokens, max_new, max_new, passes, trains, reference,
                            2.0 * shape.params())
    mask = packing_mask(sections["train_engine"], gpu, workload.prompt_tokens + max_new)
    return dataclasses.replace(workload, mask_element_bytes=mask[0], widest_pack=mask[1])


def packing_mask(engine, gpu: bool, longest_row: float) -> tuple[int, float]:
    """(bytes an element of the dense packing mask, the widest pack) for the train engine's config
    ``engine``: a mask only with ``attention=sdpa`` (the default) and a packed ``sequence_layout``
    (``varlen`` builds none, ``flex`` a small block mask, ``padded`` none; an engine without these keys
    none), in its compute ``dtype`` (``auto``: bf16 on accelerators, float32 on the CPU); packs
    (:func:`rlloom_enginekit.packing.pack_rows`) at most 2 × the longest row wide, ``shared_prompt``'s
    at least :data:`rlloom_enginekit.choices.GROUP_WIDTH`."""
    layout = getattr(engine, "sequence_layout", "padded")
    if layout == "padded" or getattr(engine, "attention", "sdpa") != "sdpa":
        return 0, 0.0
    dtype = engine.dtype if engine.dtype != "auto" else ("bfloat16" if gpu else "float32")
    widest = max(GROUP_WIDTH if layout == "shared_prompt" else 0, 2 * longest_row)
    return (4 if dtype == "float32" else 2), widest


def algorithm_passes(resolved, prompts: int) -> tuple[int, int, bool]:
    """(log-prob passes, trained engines, reference) of the configured algorithm: the reference when it
    ``needs_reference``, a critic (values pass and update) when it ``needs_critic``, the behaviour
    log-probs when its ``needs_old_log_probs(batch, prompts)`` says so (GRPO's family reads no batch
    there) or it has no such method (PPO always computes them)."""
    from rlloom.plugins.registry import get_registry

    algorithm = get_registry().build("algorithm", resolved.choices["algorithm"], resolved.sections["algorithm"])
    old = getattr(algorithm, "needs_old_log_probs", None)
    needs_old = bool(old(None, prompts)) if old is not None else True
    reference, critic = bool(algorithm.needs_reference), bool(algorithm.needs_critic)
    return needs_old + reference + critic, 1 + critic, reference
