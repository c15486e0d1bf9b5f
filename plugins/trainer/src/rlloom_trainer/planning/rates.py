"""The stage costs (:class:`~.steptime.Rates`) and the step's :class:`~.steptime.Workload` a plan uses.

From a profile taken on the cluster's kind of device (its device's name contains the cluster's, or
both are ``cpu``): the profile's rates, the per-token ones (and the weight bytes) scaled by the
parameter ratio of the planned model to the profiled one (the FLOPs of a token are 2 · P per forward).

Otherwise a roofline on the cluster's device, with P parameters, peak F FLOP/s, memory bandwidth M:

    train     6 · P / (F · TRAIN_MFU) device-seconds a token        (forward and backward)
    log_prob  2 · P / (F · TRAIN_MFU)
    gen       2 · P / (F · GEN_MFU), plus reading the bf16 weights once a decode step: 2 · P / M (over TP)
    sync      1 / M a byte (a device-local copy; between pools :mod:`.steptime` adds the links)

Attention's FLOPs (a few % at these lengths) and every fixed cost are left out: a roofline plan ranks
placements, its absolute times are optimistic until a profile on that device calibrates them.
"""

from __future__ import annotations

from rlloom_trainer.planning.hardware import Cluster
from rlloom_trainer.planning.memory import ModelShape
from rlloom_trainer.planning.profile import Profile
from rlloom_trainer.planning.steptime import Rates, StageCost, Workload

TRAIN_MFU = 0.4
"""The share of the bf16 peak a train or log-prob pass reaches (an assumption, typical of FSDP on H100s)."""

GEN_MFU = 0.3
"""The share of the peak generation's token FLOPs reach (an assumption)."""


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
            return StageCost(cost.fixed_s, cost.device_s * ratio)

        return Rates(scaled(rates.gen), scaled(rates.train), scaled(rates.log_prob), rates.sync, rates.other_s,
                     rates.decode_step_s * ratio, source=f"profile on {profile.device}")
    device = cluster.device
    token = 2 * shape.params() / device.bf16_flops
    return Rates(gen=StageCost(0.0, token / GEN_MFU), train=StageCost(0.0, 3 * token / TRAIN_MFU),
                 log_prob=StageCost(0.0, token / TRAIN_MFU), sync=StageCost(0.0, 1 / device.memory_bandwidth),
                 decode_step_s=2 * shape.params() / device.memory_bandwidth,
                 source=f"roofline on {device.name} (train MFU {TRAIN_MFU}, generation {GEN_MFU})")


def plan_workload(resolved, shape: ModelShape, profile: Profile | None, prompt_tokens: float) -> Workload:
    """The step the config ``resolved`` runs: ``trainer.train_batch_size`` prompts × ``algorithm.n``,
    ``sampling.max_new_tokens``. With a profile, its measured prompt length, its response length scaled
    by the ratio of the two ``max_new_tokens``, its passes and engines, its sync bytes scaled by the
    parameter ratio; without one, ``prompt_tokens``, full-length responses, the passes the algorithm
    asks for (:func:`algorithm_passes`) and bf16 weights."""
    sections = resolved.sections
    prompts, n = sections["trainer"].train_batch_size, sections["algorithm"].n
    max_new = sections["sampling"].max_new_tokens
    if profile is not None:
        measured = profile.workload
        response = measured.response_tokens * max_new / measured.max_new_tokens
        sync_bytes = measured.sync_bytes * shape.params() / profile.shape.params()
        return Workload(prompts, n, measured.prompt_tokens, response, max_new, measured.log_prob_passes,
                        measured.trains, measured.reference, sync_bytes)
    passes, trains, reference = algorithm_passes(resolved, prompts)
    return Workload(prompts, n, prompt_tokens, max_new, max_new, passes, trains, reference, 2.0 * shape.params())


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
