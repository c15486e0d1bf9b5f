"""The step time and the memory per device of one placement: f(rates, cluster, placement, workload).

A stage's time on D devices is a fixed part per call (dispatch, the optimizer step, a fixed-length decode
loop's per-step overhead, a collective's latency) plus device-seconds per unit (token, byte) shared by the
devices that run it (:class:`StageCost`), as measured on a pool of B devices. A profile measures both parts
again on 2·B (:mod:`.profile`): per doubling of a pool the fixed part changes by g seconds and a unit's
device-seconds by h (perfect sharing: h = 0; the data-parallel efficiency of the doubling is
e = device_s / (device_s + h)). Both are carried linearly in k = log2(D / B) to other pool sizes (through
the two measured ones; beyond them an extrapolation):

    seconds(units, D) = max(0, fixed_s + g · k) + max(0, device_s + h · k) · units / D

With W train devices (DP × SP × TP), G rollout devices (TP_r × DP_r), T tokens a step (prompt + response,
every row), R response tokens, P parameters:

    gen       = gen.seconds(R, G) + decode_step_s · max_new_tokens / TP_r
    log_prob  = passes · log_prob.seconds(T, W)                                (old, ref, critic values)
    train     = trains · max(train.fixed(W) + c · train.per_unit(T, W) + a2a / bw,
                             m · 8·P·(S−1)/S / bw)
                (c = 4/3 with gradient checkpointing; a2a: the bytes a rank sends in sequence parallelism's
                all-to-alls (:func:`sequence_parallel_bytes`); m micro-batches per rank of at most the
                micro-batch budget, each gathering bf16 weights forward and backward and reduce-scattering
                float32 gradients over the S = W shards at the link bandwidth bw, overlapped with compute)
    sync      = sync.seconds(Bw, 1) + Bw · (1/B − 1/S) / bw_g (gathering the shards; bw_g: the profile's
                measured gather bandwidth, else bw) (+ Bw / bw between pools), Bw the bytes of one weight copy
    offload   = 2 · 16·P/S / HOST_BANDWIDTH (train state out before generating and back after)

The controller's own time: other = max(0, other_s + g_o · log2(W / B)). Colocated (one pool: every stage
takes its turn) and split pools in ``trainer.async_mode=sync``: step = gen + log_prob + train + sync +
offload + other. Split pools with an async mode (generation of the next batch overlaps this one's
training): step = max(gen, log_prob + train + other) + sync.

Memory per device (:mod:`.memory`): the train pool holds the actor (and the critic) as a train engine,
the reference as float32 weights sharded like the actor; the rollout pool the bf16 weights and the KV
cache of its rows; a colocated pool both, or with offload the larger of the two phases; the train
engines' pool one packing mask of sdpa attention (:func:`.memory.packing_mask_bytes`; the engines train
one after another). A placement fits when every device holds it within ``MEMORY_FRACTION`` of its memory;
one that would fit without that mask says so (:data:`MASK_ADVICE`).
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass, field

from rlloom_trainer.planning.hardware import Cluster
from rlloom_trainer.planning.memory import (
    HEAD_CHUNK_BYTES,
    ModelShape,
    packing_mask_bytes,
    rollout_bytes_per_device,
    train_bytes_per_device,
)

MEMORY_FRACTION = 0.9
"""The share of a device's memory a plan may fill (the rest: the CUDA context, allocator fragmentation)."""

MASK_ADVICE = "sdpa's packing mask is what does not fit: train_engine.attention=varlen builds none"
"""What an exclusion adds when the dense packing mask is what does not fit."""

HOST_BANDWIDTH = 25e9
"""Bytes/s between device and host memory for offload: PCIe 5.0 x16 is 64 GB/s a direction on paper;
pinned copies reach about half of it, pageable ones less (an estimate, not measured here)."""


@dataclass(frozen=True)
class StageCost:
    """``fixed_s`` per call plus ``device_s`` device-seconds per unit over the devices that share it, on
    ``base_devices`` (the pool it was measured on); per doubling of the pool the fixed part changes by
    ``growth_s`` and a unit's device-seconds by ``device_growth_s`` (module docstring)."""

    fixed_s: float = 0.0
    device_s: float = 0.0
    growth_s: float = 0.0
    device_growth_s: float = 0.0
    base_devices: int = 1

    def doublings(self, devices: int) -> float:
        return math.log2(devices / self.base_devices)

    def fixed(self, devices: int) -> float:
        """max(0, fixed_s + growth_s · log2(devices / base_devices))."""
        return max(0.0, self.fixed_s + self.growth_s * self.doublings(devices))

    def per_unit(self, units: float, devices: int) -> float:
        """max(0, device_s + device_growth_s · log2(devices / base_devices)) · units / devices."""
        return max(0.0, self.device_s + self.device_growth_s * self.doublings(devices)) * units / devices

    def seconds(self, units: float, devices: int) -> float:
        return self.fixed(devices) + self.per_unit(units, devices)

    @property
    def efficiency(self) -> float:
        """The share of perfect sharing a doubling of the pool keeps: device_s / (device_s + device_growth_s)
        (1 without per-unit work on either pool)."""
        doubled = self.device_s + self.device_growth_s
        return self.device_s / doubled if self.device_s > 0 and doubled > 0 else 1.0


@dataclass(frozen=True)
class Rates:
    """The costs of a step's stages on one kind of device (from a profile or a roofline, :mod:`.rates`).
    ``sync`` is per byte of one weight copy; ``other_s``: the controller's own time a step (reward,
    advantages), growing by ``other_growth_s`` per doubling of the train pool from ``train.base_devices``;
    ``decode_step_s``: reading the weights once per decode step at TP 1 (0 when a
    profile's ``gen.fixed_s`` holds it); ``gather_bandwidth``: bytes/s of a sync's gather of the shards
    as a profile measured it (0: the cluster's link)."""

    gen: StageCost
    train: StageCost
    log_prob: StageCost
    sync: StageCost
    other_s: float = 0.0
    other_growth_s: float = 0.0
    decode_step_s: float = 0.0
    gather_bandwidth: float = 0.0
    source: str = ""


@dataclass(frozen=True)
class Workload:
    """One step: ``prompts`` × ``n`` rows of ``prompt_tokens`` + ``response_tokens`` (means) tokens,
    ``max_new_tokens`` decode steps; ``log_prob_passes`` forward passes over the batch (old log-probs,
    reference, critic values), ``trains`` updated engines (actor, critic); ``sync_bytes``: one weight copy;
    ``mask_element_bytes``: bytes an element of the dense packing mask the train engine builds for a
    micro-batch (0: none), in packs at most ``widest_pack`` tokens wide (:func:`.memory.packing_mask_bytes`)."""

    prompts: int
    n: int
    prompt_tokens: float
    response_tokens: float
    max_new_tokens: int
    log_prob_passes: int
    trains: int
    reference: bool
    sync_bytes: float
    mask_element_bytes: int = 0
    widest_pack: float = 0.0

    @property
    def rows(self) -> int:
        return self.prompts * self.n

    @property
    def tokens(self) -> float:
        return self.rows * (self.prompt_tokens + self.response_tokens)

    @property
    def generated(self) -> float:
        return self.rows * self.response_tokens


@dataclass(frozen=True)
class Placement:
    """``train_devices`` for actor, reference and critic (DP × ``sequence_parallel`` ×
    ``train_tensor_parallel``), ``rollout_devices`` for the rollout (0: colocated on the train devices;
    ``rollout_tensor_parallel`` × DP), the micro-batch token budget, offload and gradient checkpointing."""

    train_devices: int
    rollout_devices: int = 0
    sequence_parallel: int = 1
    train_tensor_parallel: int = 1
    rollout_tensor_parallel: int = 1
    micro_batch_tokens: int = 4096
    offload: bool = False
    checkpointing: bool = False

    @property
    def colocated(self) -> bool:
        return self.rollout_devices == 0

    @property
    def devices(self) -> int:
        return self.train_devices + self.rollout_devices

    @property
    def gen_devices(self) -> int:
        return self.rollout_devices or self.train_devices

    def describe(self) -> str:
        pools = (f"colocated on {self.train_devices}" if self.colocated
                 else f"split: train {self.train_devices} + rollout {self.rollout_devices}")
        train_dp = self.train_devices // (self.sequence_parallel * self.train_tensor_parallel)
        extras = [f"train DP{train_dp} SP{self.sequence_parallel} TP{self.train_tensor_parallel}",
                  f"rollout TP{self.rollout_tensor_parallel}", f"micro-batch {self.micro_batch_tokens} tokens"]
        extras += ["offload"] * self.offload + ["checkpointing"] * self.checkpointing
        return f"{pools}; " + ", ".join(extras)


@dataclass
class Prediction:
    """A placement's ``stages`` (seconds), ``step_s``, ``memory`` (bytes per device by pool), what
    ``binds`` (its longest stage, or the communication that outlasts a stage's compute), ``excluded``
    (why it cannot run; empty when it can) and ``mask_bytes`` (the train pool's packing mask per device)."""

    placement: Placement
    stages: dict[str, float] = field(default_factory=dict)
    step_s: float = math.inf
    memory: dict[str, float] = field(default_factory=dict)
    binds: str = ""
    excluded: str = ""
    mask_bytes: float = 0.0


def predict(placement: Placement, shape: ModelShape, workload: Workload, rates: Rates, cluster: Cluster,
            async_mode: str = "sync") -> Prediction:
    """The :class:`Prediction` of ``placement`` (module docstring)."""
    prediction = Prediction(placement)
    prediction.excluded = layout_problem(placement, shape, cluster, async_mode)
    if prediction.excluded:
        return prediction
    prediction.memory = memory_per_device(placement, shape, workload)
    prediction.mask_bytes = mask_per_device(placement, workload)
    limit = MEMORY_FRACTION * cluster.device.memory_bytes
    over = {pool: used for pool, used in prediction.memory.items() if used > limit}
    if over:
        pool, used = max(over.items(), key=lambda item: item[1])
        prediction.excluded = (f"{pool} needs {used / 1e9:.1f} GB per device, over {MEMORY_FRACTION:.0%} of "
                               f"{cluster.device.memory_bytes / 1e9:.0f} GB")
        unmasked = memory_per_device(placement, shape, dataclasses.replace(workload, mask_element_bytes=0))
        if prediction.mask_bytes and max(unmasked.values()) <= limit:
            prediction.excluded += f"; {MASK_ADVICE}"
        return prediction
    prediction.stages, comm_bound = stage_seconds(placement, shape, workload, rates, cluster)
    stages = prediction.stages
    if placement.colocated or async_mode == "sync":
        prediction.step_s = sum(stages.values())
    else:
        busy = stages["log_prob"] + stages["train"] + stages["other"]
        prediction.step_s = max(stages["gen"], busy) + stages["sync"]
    longest = max(stages, key=stages.get)
    prediction.binds = f"{longest} ({stages[longest] / prediction.step_s:.0%} of the step)"
    if longest == "train" and comm_bound:
        prediction.binds += ", FSDP communication outlasts its compute"
    return prediction


def layout_problem(placement: Placement, shape: ModelShape, cluster: Cluster, async_mode: str) -> str:
    """Why the layout cannot run, or ``""``: SP and TP must divide the heads and key/value heads and the
    pool; the devices must exist; an async mode needs the rollout on a pool of its own."""
    if placement.devices > cluster.devices:
        return f"needs {placement.devices} devices, the cluster has {cluster.devices}"
    if placement.colocated and async_mode != "sync":
        return f"trainer.async_mode={async_mode} needs the rollout on a pool of its own"
    for name, size, pool in (("sequence parallel", placement.sequence_parallel, placement.train_devices),
                             ("train tensor parallel", placement.train_tensor_parallel, placement.train_devices),
                             ("rollout tensor parallel", placement.rollout_tensor_parallel,
                              placement.gen_devices)):
        if shape.heads % size or shape.kv_heads % size:
            return f"{name} {size} does not divide the heads ({shape.heads}) and key/value heads ({shape.kv_heads})"
        if pool % size:
            return f"{name} {size} does not divide its pool of {pool}"
    if placement.train_devices % (placement.sequence_parallel * placement.train_tensor_parallel):
        return "sequence parallel × tensor parallel does not divide the train pool"
    return ""


def memory_per_device(placement: Placement, shape: ModelShape, workload: Workload) -> dict[str, float]:
    """Bytes per device of each pool (module docstring)."""
    shards = placement.train_devices
    tokens = micro_batch_tokens(placement, workload) / placement.train_tensor_parallel
    actor = train_bytes_per_device(shape, shards, tokens, placement.sequence_parallel, placement.checkpointing)
    train = (actor * workload.trains + workload.reference * (4 * shape.params() / shards + HEAD_CHUNK_BYTES)
             + mask_per_device(placement, workload))
    rollout_dp = placement.gen_devices // placement.rollout_tensor_parallel
    in_flight = math.ceil(workload.rows / rollout_dp) * (workload.prompt_tokens + workload.response_tokens)
    rollout = rollout_bytes_per_device(shape, placement.rollout_tensor_parallel, in_flight)
    if not placement.colocated:
        return {"train pool": train, "rollout pool": rollout}
    if placement.offload:
        weights = 2 * shape.params() / placement.rollout_tensor_parallel
        return {"colocated pool": max(train + weights, rollout)}
    return {"colocated pool": train + rollout}


def mask_per_device(placement: Placement, workload: Workload) -> float:
    """The packing mask of one micro-batch on a train device: the whole group's micro-batch, whatever SP and
    TP (:func:`.memory.packing_mask_bytes`)."""
    return packing_mask_bytes(micro_batch_tokens(placement, workload), workload.widest_pack,
                              workload.mask_element_bytes)


def micro_batch_tokens(placement: Placement, workload: Workload) -> float:
    """Tokens in one micro-batch of a data-parallel rank: the budget, at most the rank's share of the
    step, at least one row (rows are not cut)."""
    train_dp = placement.train_devices // (placement.sequence_parallel * placement.train_tensor_parallel)
    row = workload.prompt_tokens + workload.response_tokens
    return max(min(placement.micro_batch_tokens, workload.tokens / train_dp), row)


def sequence_parallel_bytes(placement: Placement, shape: ModelShape, tokens: float) -> float:
    """Bytes each rank sends in Ulysses' all-to-alls for ``tokens`` tokens of its group, forward and
    backward: per layer q, k, v and the output ((2·h + 2·K·d) values a token, bf16), (SP − 1)/SP of its
    1/SP share leaving the rank."""
    size = placement.sequence_parallel
    per_token = 2 * (2 * shape.hidden + 2 * shape.kv_heads * shape.head_dim)
    return 2 * shape.layers * tokens / size * per_token * (size - 1) / size


def stage_seconds(placement: Placement, shape: ModelShape, workload: Workload, rates: Rates,
                  cluster: Cluster) -> tuple[dict[str, float], bool]:
    """Each stage's seconds (module docstring) and whether the train stage is bound by communication."""
    shards = placement.train_devices
    bandwidth = link_bandwidth(cluster, shards)
    gen = (rates.gen.seconds(workload.generated, placement.gen_devices)
           + rates.decode_step_s * workload.max_new_tokens / placement.rollout_tensor_parallel)
    log_prob = workload.log_prob_passes * rates.log_prob.seconds(workload.tokens, shards)
    compute_factor = 4 / 3 if placement.checkpointing else 1.0
    compute = rates.train.fixed(shards) + compute_factor * rates.train.per_unit(workload.tokens, shards)
    train_dp = shards // (placement.sequence_parallel * placement.train_tensor_parallel)
    micro_batches = math.ceil(workload.tokens / train_dp / micro_batch_tokens(placement, workload))
    communication = micro_batches * 8 * shape.params() * (shards - 1) / shards / bandwidth
    compute += sequence_parallel_bytes(placement, shape, workload.tokens / train_dp) / bandwidth
    stages = {"gen": gen, "log_prob": log_prob, "train": workload.trains * max(compute, communication),
              "sync": sync_seconds(placement, workload, rates, cluster), "offload": 0.0,
              "other": max(0.0, rates.other_s + rates.other_growth_s * rates.train.doublings(shards))}
    if placement.offload:
        stages["offload"] = 2 * 16 * shape.params() / shards / HOST_BANDWIDTH
    return stages, communication > compute


def sync_seconds(placement: Placement, workload: Workload, rates: Rates, cluster: Cluster) -> float:
    """One weight sync (module docstring): the measured copy, the gather of the S train shards beyond what
    the rates' pool of B_s already gathered, and between split pools the link or the network."""
    shards, copy = placement.train_devices, workload.sync_bytes
    bandwidth = link_bandwidth(cluster, shards)
    gather = rates.gather_bandwidth if rates.gather_bandwidth and shards <= cluster.devices_per_node else bandwidth
    sync = rates.sync.seconds(copy, 1) + copy * (1 / rates.sync.base_devices - 1 / shards) / gather
    if not placement.colocated:
        sync += copy / (cluster.network_bandwidth if placement.devices > cluster.devices_per_node else bandwidth)
    return max(sync, 0.0)


def link_bandwidth(cluster: Cluster, devices: int) -> float:
    """Bytes/s between the devices of a pool of ``devices``: the node's links when it fits in one node,
    else the network."""
    return cluster.device.link_bandwidth if devices <= cluster.devices_per_node else cluster.network_bandwidth
