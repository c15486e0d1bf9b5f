"""``rlloom plan --profile``: a few steps of the user's config at two batch sizes, on its pools and on them
doubled, and each stage's cost fitted from the metrics the trainer already logs (``metrics.jsonl``), as a
:class:`Profile` (JSON).

Per step after the first (warm-up) and per stage, (units, seconds):

    gen       timing_s/gen             response tokens = response_length/mean · rows
    log_prob  timing_s/old_log_prob, timing_s/ref, timing_s/values: one sample per pass, its tokens
              perf/total_tokens
    train     timing_s/update_actor, timing_s/update_critic, per engine: perf/total_tokens
    sync      timing_s/update_weights  perf/weight_sync_bytes
    other     timing_s/step − the stages above (reward, advantages, the controller)

Of each run, each stage keeps its quickest sample (:func:`quickest`: on a shared machine other processes
only ever add time, and the quickest step is the one they disturbed least). The runs at the config's
train batch size B and at B / 2, on the config's D devices (the actor's pool under ``launcher=ray``, 1
process otherwise), are fitted by least squares as seconds = fixed_s + slope · units (:func:`fit`);
``device_s`` = slope × D, device-seconds to be shared by other pool sizes (:mod:`.steptime`).
``rows`` = ``trainer.train_batch_size`` × ``algorithm.n``.

Under a launcher with pools (``launcher=ray``) the same two runs on every pool doubled
(:func:`doubled_overrides`) are fitted alike, (fixed₂, slope₂) on 2·D devices; each stage then has
(:func:`pool_scaling`) its fixed part's change per doubling g = fixed₂ − fixed and its device-seconds'
h = 2·D · slope₂ − D · slope (its data-parallel efficiency e = slope / (2 · slope₂)), which the step-time
model carries to other pool sizes; the rest of the step its growth alike (the means' difference); the
sync's gather of the shards gets its bandwidth (:func:`gather_bandwidth`). On a fixed CPU count the
doubled pools' workers get fewer CPUs (and torch threads) each when they would not fit otherwise;
``threads`` records the threads per worker of each.
"""

from __future__ import annotations

import dataclasses
import json
import os
import statistics
import tempfile
from dataclasses import dataclass

from rlloom.protocols import PlacesInPools
from rlloom_enginekit.threads import available_cores, threads_for

from rlloom_trainer.planning.memory import ModelShape
from rlloom_trainer.planning.steptime import Rates, StageCost, Workload

LOG_PROB_STAGES = ("old_log_prob", "ref", "values")
TRAIN_STAGES = ("update_actor", "update_critic")


@dataclass(frozen=True)
class Profile:
    """What ``rlloom plan --profile`` measured: the ``device`` kind (``cpu`` or the CUDA device's name)
    and how many (``devices``) the actor's pool had, the model's ``shape``, the ``workload`` of its
    larger run, the fitted ``rates``, the quickest step time of each run after its first (``step_s``
    by train batch size; ``doubled_step_s``: at B on the pools doubled, 0 when not run) and the torch
    ``threads`` per worker by the actor pool's size."""

    device: str
    devices: int
    shape: ModelShape
    workload: Workload
    rates: Rates
    step_s: dict[int, float]
    overrides: list[str]
    doubled_step_s: float = 0.0
    threads: dict[int, int] = dataclasses.field(default_factory=dict)

    def to_json(self) -> dict:
        return dataclasses.asdict(self)

    @classmethod
    def from_json(cls, data: dict) -> Profile:
        rates = dict(data["rates"])
        for stage in ("gen", "train", "log_prob", "sync"):
            rates[stage] = StageCost(**rates[stage])
        return cls(data["device"], data["devices"], ModelShape(**data["shape"]), Workload(**data["workload"]),
                   Rates(**rates), {int(size): seconds for size, seconds in data["step_s"].items()},
                   list(data["overrides"]), data.get("doubled_step_s", 0.0),
                   {int(size): count for size, count in data.get("threads", {}).items()})


def read_profile(path: str) -> Profile:
    """The :class:`Profile` a ``--profile`` run wrote to ``path``."""
    with open(path, encoding="utf-8") as handle:
        return Profile.from_json(json.load(handle))


def stage_samples(rows: list[dict], n_rows: int) -> dict[str, list[tuple[float, float]]]:
    """(units, seconds) per stage of every metrics row after the first step (module docstring)."""
    samples: dict[str, list[tuple[float, float]]] = {"gen": [], "log_prob": [], "train": [], "sync": [], "other": []}
    for row in rows:
        if row.get("step", 0) < 2 or "timing_s/step" not in row:
            continue
        tokens = row["perf/total_tokens"]
        timed = [("gen", row["response_length/mean"] * n_rows, row["timing_s/gen"]),
                 ("sync", row.get("perf/weight_sync_bytes", 0.0), row.get("timing_s/update_weights", 0.0))]
        timed += [("log_prob", tokens, row[f"timing_s/{key}"]) for key in LOG_PROB_STAGES if f"timing_s/{key}" in row]
        timed += [("train", tokens, row[f"timing_s/{key}"]) for key in TRAIN_STAGES if f"timing_s/{key}" in row]
        for stage, units, seconds in timed:
            samples[stage].append((units, seconds))
        samples["other"].append((1.0, row["timing_s/step"] - sum(seconds for _, _, seconds in timed)))
    return samples


def quickest(samples: dict[str, list[tuple[float, float]]]) -> dict[str, list[tuple[float, float]]]:
    """Each stage's sample of the fewest seconds (none for a stage without samples)."""
    return {stage: [min(values, key=lambda sample: sample[1])] if values else [] for stage, values in samples.items()}


def fit(samples: list[tuple[float, float]]) -> tuple[float, float]:
    """(fixed_s, slope) of seconds = fixed_s + slope · units by least squares, both ≥ 0 (a negative
    intercept is refitted through the origin); through the origin when the units do not vary."""
    if not samples:
        return 0.0, 0.0
    units = [unit for unit, _ in samples]
    seconds = [second for _, second in samples]
    mean_u, mean_s = statistics.fmean(units), statistics.fmean(seconds)
    spread = sum((unit - mean_u) ** 2 for unit in units)
    if spread > 0:
        slope = sum((unit - mean_u) * (second - mean_s) for unit, second in samples) / spread
        fixed = mean_s - slope * mean_u
        if fixed >= 0 and slope >= 0:
            return fixed, slope
        if slope < 0:
            return max(mean_s, 0.0), 0.0
    through_origin = sum(unit * second for unit, second in samples) / sum(unit * unit for unit in units)
    return 0.0, max(through_origin, 0.0)


def fitted_rates(samples: dict[str, list[tuple[float, float]]], devices: int,
                 doubled: dict[str, list[tuple[float, float]]] | None = None) -> Rates:
    """:class:`Rates` from :func:`stage_samples` (pooled over the runs on ``devices``): log-prob and train
    samples are per pass and engine; the slopes times ``devices`` become device-seconds. ``doubled``: the
    samples of the runs on 2 × ``devices``, for each stage's :func:`pool_scaling`, the other time's growth
    and the sync's :func:`gather_bandwidth` (without them: perfect sharing, no growth, the cluster's link)."""
    doubled = doubled or {}
    costs = {}
    for stage in ("gen", "log_prob", "train"):
        fixed, slope = fit(samples[stage])
        growth = pool_scaling(fixed, slope, *fit(doubled[stage]), devices) if doubled.get(stage) else (0.0, 0.0)
        costs[stage] = StageCost(fixed, slope * devices, *growth, devices)
    costs["sync"] = StageCost(*fit(samples["sync"]), base_devices=devices)
    other = mean_seconds(samples["other"])
    other_growth = mean_seconds(doubled["other"]) - other if doubled.get("other") else 0.0
    gather = gather_bandwidth(costs["sync"], doubled["sync"], devices) if doubled.get("sync") else 0.0
    return Rates(source="profile", other_s=other, other_growth_s=other_growth, gather_bandwidth=gather, **costs)


def mean_seconds(samples: list[tuple[float, float]]) -> float:
    """The mean seconds of ``samples``, at least 0 (0 without samples)."""
    return max(statistics.fmean(seconds for _, seconds in samples), 0.0) if samples else 0.0


def pool_scaling(fixed: float, slope: float, fixed_2: float, slope_2: float, devices: int) -> tuple[float, float]:
    """(growth_s, device_growth_s) of a stage fitted as fixed + slope · units on D = ``devices`` and
    fixed₂ + slope₂ · units on 2·D: the fixed part's change fixed₂ − fixed and the device-seconds'
    2·D · slope₂ − D · slope."""
    return fixed_2 - fixed, 2 * devices * slope_2 - devices * slope


def gather_bandwidth(sync: StageCost, doubled: list[tuple[float, float]], devices: int) -> float:
    """Bytes/s of the sync's gather of the shards on 2 × ``devices``: at the mean bytes of its ``doubled``
    samples, a copy takes ``extra`` seconds longer there (the two fits' difference), in which each rank
    gathers bytes · (1/D − 1/(2·D)) = bytes / (2·D) more; 0 (the cluster's link) when it took no longer."""
    copy = statistics.fmean(units for units, _ in doubled)
    fixed_2, slope_2 = fit(doubled)
    extra = fixed_2 + slope_2 * copy - sync.seconds(copy, 1)
    return copy / (2 * devices) / extra if copy > 0 and extra > 0 else 0.0


def measured_workload(rows: list[dict], prompts: int, n: int, max_new_tokens: int) -> Workload:
    """The :class:`Workload` of a run's steps after the first: mean prompt and response tokens, the
    passes and engines its steps timed, its weight-sync bytes."""
    steps = [row for row in rows if row.get("step", 0) >= 2 and "timing_s/step" in row]
    response = statistics.fmean(row["response_length/mean"] for row in steps)
    total = statistics.fmean(row["perf/total_tokens"] for row in steps)
    last = steps[-1]
    return Workload(prompts, n, total / (prompts * n) - response, response, max_new_tokens,
                    log_prob_passes=sum(f"timing_s/{key}" in last for key in LOG_PROB_STAGES),
                    trains=sum(f"timing_s/{key}" in last for key in TRAIN_STAGES),
                    reference="timing_s/ref" in last, sync_bytes=last.get("perf/weight_sync_bytes", 0.0))


def read_metrics(run_dir: str) -> list[dict]:
    with open(os.path.join(run_dir, "metrics.jsonl"), encoding="utf-8") as handle:
        return [json.loads(line) for line in handle if line.strip()]


def profile_overrides(overrides: list[str], batch_size: int, steps: int, run_dir: str) -> list[str]:
    """The user's overrides, then what a profile run sets: ``steps`` steps of ``batch_size`` prompts in
    ``run_dir``, no validation, no checkpoint resume, the metrics file only."""
    return [*overrides, f"trainer.total_steps={steps}", f"trainer.train_batch_size={batch_size}",
            f"trainer.run_dir={run_dir}", "trainer.resume=never", "trainer.val_before_train=false",
            "trainer.test_freq=0", "trainer.trackers=[]", "trainer.save_freq=0"]


def run_profile(overrides: list[str], steps: int) -> Profile:
    """Run the config ``overrides`` compose for ``steps`` steps at its train batch size B and at
    max(1, B // 2), and under a launcher with pools the same on the pools doubled; :class:`Profile` of
    them (module docstring)."""
    from rlloom.config import compose_config

    resolved = compose_config(overrides)
    batch = resolved.sections["trainer"].train_batch_size
    n, max_new = resolved.sections["algorithm"].n, resolved.sections["sampling"].max_new_tokens
    devices, launcher = actor_devices(resolved), resolved.sections["launcher"]
    samples, step_s, rows, shape = two_sizes(overrides, batch, n, steps)
    threads = {devices: threads_per_worker(launcher)}
    doubled, doubled_step = {}, 0.0
    if isinstance(launcher, PlacesInPools):
        extra = doubled_overrides(launcher, launcher.num_cpus or available_cores())
        doubled, doubled_steps, _, _ = two_sizes([*overrides, *extra], batch, n, steps)
        doubled_step = doubled_steps[batch]
        threads[2 * devices] = threads_per_worker(compose_config([*overrides, *extra]).sections["launcher"])
    rates = fitted_rates(samples, devices, doubled)
    return Profile(device_kind(resolved.sections["trainer"].device), devices, shape,
                   measured_workload(rows, batch, n, max_new), rates, step_s, list(overrides), doubled_step, threads)


def two_sizes(overrides: list[str], batch: int, n: int, steps: int) -> tuple[dict, dict, list[dict], ModelShape]:
    """(each stage's quickest sample of each run, pooled; each run's quickest step by batch size; the larger
    run's metrics rows; the model's shape) of ``steps`` steps at ``batch`` prompts and at max(1, batch // 2)."""
    samples: dict[str, list] = {}
    step_s = {}
    for size in sorted({max(1, batch // 2), batch}):
        rows, shape = profile_run(overrides, size, steps)
        for stage, values in quickest(stage_samples(rows, size * n)).items():
            samples.setdefault(stage, []).extend(values)
        step_s[size] = quickest_step(rows)
    return samples, step_s, rows, shape


def profile_run(overrides: list[str], batch_size: int, steps: int) -> tuple[list[dict], ModelShape]:
    """(the metrics rows, the model's shape) of ``steps`` steps of the config at ``batch_size`` prompts."""
    from rlloom.config import compose_config

    from rlloom_trainer.run import fit_run

    with tempfile.TemporaryDirectory(prefix="rlloom-profile-") as run_dir:
        fit_run(compose_config(profile_overrides(overrides, batch_size, steps, run_dir)))
        return read_metrics(run_dir), ModelShape.from_folder(os.path.join(run_dir, "final_model"))


def quickest_step(rows: list[dict]) -> float:
    """The least ``timing_s/step`` after the first step."""
    return min(row["timing_s/step"] for row in rows if row.get("step", 0) >= 2 and "timing_s/step" in row)


def used_pools(launcher) -> dict[str, int]:
    """The pools the roles run in (``launcher.pools()`` of a launcher with pools): the mapped ones, and
    ``global`` while the actor or the rollout is unmapped."""
    pools = launcher.pools()
    names = set(launcher.mapping.values()) | ({"global"} if {"actor", "rollout"} - set(launcher.mapping) else set())
    return {name: pools[name] for name in sorted(names)}


def doubled_overrides(launcher, cpus: float) -> list[str]:
    """Overrides that double every used pool (:func:`used_pools`) on the same ``cpus``: when the doubled
    pools' workers would reserve more, ``launcher.cpus_per_worker`` becomes cpus / workers (Ray could not
    place them otherwise) and a ``launcher.threads_per_worker`` > 0 shrinks alike (at least 1)."""
    pools = used_pools(launcher)
    out = [f"++launcher.resource_pools.{name}={2 * size}" for name, size in pools.items()]
    workers = 2 * sum(pools.values())
    if workers * launcher.cpus_per_worker > cpus:
        share = cpus / workers
        out.append(f"launcher.cpus_per_worker={share:g}")
        if launcher.threads_per_worker > 0:
            threads = max(1, int(launcher.threads_per_worker * share / launcher.cpus_per_worker))
            out.append(f"launcher.threads_per_worker={threads}")
    return out


def threads_per_worker(launcher) -> int:
    """Torch threads a worker of ``launcher`` computes with (:func:`rlloom_enginekit.threads.threads_for`;
    a launcher without pools: its one process's ``num_threads``, or the cores it may run on)."""
    if isinstance(launcher, PlacesInPools):
        return threads_for(launcher.threads_per_worker, launcher.cpus_per_worker)
    return threads_for(getattr(launcher, "num_threads", 0), available_cores())


def actor_devices(resolved) -> int:
    """Processes of the actor's pool (a launcher that :class:`~rlloom.protocols.PlacesInPools`; 1 when the
    launcher has no pools: ``launcher=local``)."""
    launcher = resolved.sections["launcher"]
    return launcher.pools()[launcher.pool_of("actor")] if isinstance(launcher, PlacesInPools) else 1


def device_kind(trainer_device: str) -> str:
    """``cpu``, or the name of the CUDA device ``trainer.device`` resolves to."""
    import torch

    from rlloom.choices import resolve_device

    device = resolve_device(trainer_device)
    return torch.cuda.get_device_name(device) if device.type == "cuda" else "cpu"
