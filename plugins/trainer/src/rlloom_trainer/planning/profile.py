"""``rlloom plan --profile``: a few steps of the user's config at two batch sizes, and each stage's cost
fitted from the metrics the trainer already logs (``metrics.jsonl``), as a :class:`Profile` (JSON).

Per step after the first (warm-up) and per stage, (units, seconds):

    gen       timing_s/gen             response tokens = response_length/mean · rows
    log_prob  timing_s/old_log_prob, timing_s/ref, timing_s/values: one sample per pass, its tokens
              perf/total_tokens
    train     timing_s/update_actor, timing_s/update_critic, per engine: perf/total_tokens
    sync      timing_s/update_weights  perf/weight_sync_bytes
    other     timing_s/step − the stages above (reward, advantages, the controller)

Of each run, each stage keeps its quickest sample (:func:`quickest`: on a shared machine other processes
only ever add time, and the quickest step is the one they disturbed least); the two runs' samples are
fitted by least squares as seconds = fixed_s + slope · units (:func:`fit`); ``device_s`` = slope × the
devices the profile ran on (the actor's pool under ``launcher=ray``, 1 process otherwise), so the rates
are device-seconds, to be shared by other pool sizes (:mod:`.steptime`). ``rows`` =
``trainer.train_batch_size`` × ``algorithm.n``.
"""

from __future__ import annotations

import dataclasses
import json
import os
import statistics
import tempfile
from dataclasses import dataclass

from rlloom_trainer.planning.memory import ModelShape
from rlloom_trainer.planning.steptime import Rates, StageCost, Workload

LOG_PROB_STAGES = ("old_log_prob", "ref", "values")
TRAIN_STAGES = ("update_actor", "update_critic")


@dataclass(frozen=True)
class Profile:
    """What ``rlloom plan --profile`` measured: the ``device`` kind (``cpu`` or the CUDA device's name)
    and how many (``devices``) the actor's pool had, the model's ``shape``, the ``workload`` of its
    larger run, the fitted ``rates`` and the quickest step time of each run after its first (``step_s``
    by train batch size)."""

    device: str
    devices: int
    shape: ModelShape
    workload: Workload
    rates: Rates
    step_s: dict[int, float]
    overrides: list[str]

    def to_json(self) -> dict:
        return dataclasses.asdict(self)

    @classmethod
    def from_json(cls, data: dict) -> Profile:
        rates = dict(data["rates"])
        for stage in ("gen", "train", "log_prob", "sync"):
            rates[stage] = StageCost(**rates[stage])
        return cls(data["device"], data["devices"], ModelShape(**data["shape"]), Workload(**data["workload"]),
                   Rates(**rates), {int(size): seconds for size, seconds in data["step_s"].items()},
                   list(data["overrides"]))


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


def fitted_rates(samples: dict[str, list[tuple[float, float]]], devices: int) -> Rates:
    """:class:`Rates` from :func:`stage_samples` (pooled over the runs): log-prob and train samples are
    per pass and engine; the slopes times ``devices`` become device-seconds."""
    costs = {}
    for stage in ("gen", "log_prob", "train", "sync"):
        fixed, slope = fit(samples[stage])
        costs[stage] = StageCost(fixed, slope * (devices if stage != "sync" else 1))
    other = statistics.fmean(second for _, second in samples["other"]) if samples["other"] else 0.0
    return Rates(source="profile", other_s=max(other, 0.0), **costs)


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
    max(1, B // 2); :class:`Profile` of the two (module docstring)."""
    from rlloom.config import compose_config

    from rlloom_trainer.trainer import fit_run

    resolved = compose_config(overrides)
    batch = resolved.sections["trainer"].train_batch_size
    n, max_new = resolved.sections["algorithm"].n, resolved.sections["sampling"].max_new_tokens
    samples: dict[str, list] = {}
    step_s, rows, shape = {}, [], None
    for size in sorted({max(1, batch // 2), batch}):
        with tempfile.TemporaryDirectory(prefix="rlloom-profile-") as run_dir:
            fit_run(compose_config(profile_overrides(overrides, size, steps, run_dir)))
            rows = read_metrics(run_dir)
            shape = ModelShape.from_folder(os.path.join(run_dir, "final_model"))
        for stage, values in quickest(stage_samples(rows, size * n)).items():
            samples.setdefault(stage, []).extend(values)
        step_s[size] = min(row["timing_s/step"] for row in rows if row.get("step", 0) >= 2 and "timing_s/step" in row)
    workload = measured_workload(rows, batch, n, max_new)
    devices = actor_devices(resolved)
    rates = fitted_rates(samples, devices)
    return Profile(device_kind(resolved.sections["trainer"].device), devices, shape, workload, rates, step_s,
                   list(overrides))


def actor_devices(resolved) -> int:
    """Processes of the actor's pool: ``launcher.resource_pools[mapping.actor or "global"]`` (1 when the
    launcher has no pools: ``launcher=local``)."""
    launcher = resolved.sections["launcher"]
    pools = getattr(launcher, "resource_pools", None) or {}
    pool = (getattr(launcher, "mapping", None) or {}).get("actor", "global")
    return int(pools.get(pool, 1))


def device_kind(trainer_device: str) -> str:
    """``cpu``, or the name of the CUDA device ``trainer.device`` resolves to."""
    import torch

    from rlloom.choices import resolve_device

    device = resolve_device(trainer_device)
    return torch.cuda.get_device_name(device) if device.type == "cuda" else "cpu"
