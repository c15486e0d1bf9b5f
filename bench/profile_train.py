"""Where a training step's wall time goes: ``rlloom train`` under cProfile, in this process.

Runs the quickstart (the default config: SmolLM2, 4 prompts x 8 samples, 16 new tokens) for
``--steps`` steps without validation, profiles only steps 2 to ``--steps`` (model loading,
conversion and the first step's warm-up left out) and prints the functions that took the most wall
time, by cumulative and by own time. On a GPU a host wait (``.item()``, ``.tolist()``, a
synchronize) shows as time in that call, so the tables also say where the host waits for the
device. ``--out`` writes them as JSON with the steps' median ``timing_s/*`` and ``perf/*``
(:func:`bench_vs_trl.step_breakdown`).

``--profiler torch`` profiles the same steps with ``torch.profiler`` instead: the operators by own
device time (kernels) and by own host time (the CUDA runtime's launches and waits among them), and
``device_busy_fraction``, the kernels' summed time over the profiled steps' wall time — near 1 the
step is bound by the device's work, far below 1 by the host (launches, Python, syncs).

    python bench/profile_train.py --device cuda --steps 6 --out profile.json
    python bench/profile_train.py --device cuda --steps 6 --profiler torch --out profile.json
    python bench/profile_train.py --device cpu --steps 3 preset=tiny     # extra args: Hydra overrides
"""

from __future__ import annotations

import argparse
import cProfile
import json
import pstats
import shutil
import tempfile
import time

import torch

import rlloom_trainer
from rlloom_trainer.testing import metric_rows
from rlloom_trainer.trainer import Trainer

from bench_vs_trl import step_breakdown

TOP = 30


def profile_steps(start, stop, first: int, last: int) -> None:
    """Make the trainer's ``log`` call ``start()`` once step ``first`` is logged and ``stop()`` once
    step ``last`` is: the steps in between are profiled, nothing before or after them."""
    log = Trainer.log

    def logged(trainer: Trainer, metrics: dict[str, float], step: int) -> None:
        log(trainer, metrics, step)
        if step == first:
            start()
        elif step == last:
            stop()

    Trainer.log = logged


def table(stats: pstats.Stats, key: str) -> list[dict]:
    """The :data:`TOP` functions by ``key`` (``cumulative`` or ``tottime``)."""
    stats.sort_stats(key)
    rows = []
    for func in stats.fcn_list[:TOP]:
        calls, _, own, cumulative, _ = stats.stats[func]
        rows.append({"function": f"{func[0]}:{func[1]}({func[2]})", "calls": calls, "own_s": round(own, 4),
                     "cumulative_s": round(cumulative, 4)})
    return rows


def operator_table(events, key: str) -> list[dict]:
    """The :data:`TOP` operators of ``torch.profiler``'s averages by ``key`` (an attribute in µs)."""
    rows = sorted(events, key=lambda event: getattr(event, key), reverse=True)[:TOP]
    return [{"operator": event.key, "calls": event.count, "own_device_s": round(event.self_device_time_total / 1e6, 4),
             "own_host_s": round(event.self_cpu_time_total / 1e6, 4)} for event in rows]


class TorchProfile:
    """``torch.profiler`` over the profiled steps, host and (where there is one) device activity."""

    def __init__(self) -> None:
        activities = [torch.profiler.ProfilerActivity.CPU]
        if torch.cuda.is_available():
            activities.append(torch.profiler.ProfilerActivity.CUDA)
        self.profiler = torch.profiler.profile(activities=activities)
        self.wall_s = 0.0

    def start(self) -> None:
        self.profiler.start()
        self.wall_s = -time.perf_counter()

    def stop(self) -> None:
        self.profiler.stop()
        self.wall_s += time.perf_counter()

    def tables(self) -> dict:
        events = self.profiler.key_averages()
        device_s = sum(event.self_device_time_total for event in events) / 1e6
        return {"wall_s": round(self.wall_s, 4), "device_busy_s": round(device_s, 4),
                "device_busy_fraction": round(device_s / self.wall_s, 4) if self.wall_s else 0.0,
                "by_own_device_time": operator_table(events, "self_device_time_total"),
                "by_own_host_time": operator_table(events, "self_cpu_time_total")}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--device", default="auto")
    parser.add_argument("--steps", type=int, default=6)
    parser.add_argument("--profiler", choices=["cprofile", "torch"], default="cprofile",
                        help="cProfile (Python functions, host waits) or torch.profiler (operators, device time)")
    parser.add_argument("--out", help="write the tables and the step breakdown to this JSON file")
    parser.add_argument("overrides", nargs="*", help="Hydra overrides for rlloom train")
    args = parser.parse_args()
    if args.steps < 2:
        parser.error("--steps: at least 2 (the first step is left out of the profile)")
    run_dir = tempfile.mkdtemp(prefix="rlloom-profile-")
    profiler = cProfile.Profile() if args.profiler == "cprofile" else TorchProfile()
    if args.profiler == "cprofile":
        profile_steps(profiler.enable, profiler.disable, first=1, last=args.steps)
    else:
        profile_steps(profiler.start, profiler.stop, first=1, last=args.steps)
    rlloom_trainer.train([f"trainer.device={args.device}", f"trainer.run_dir={run_dir}", "trainer.trackers=[jsonl]",
                          f"trainer.total_steps={args.steps}", "trainer.val_before_train=false", "trainer.test_freq=0",
                          "trainer.save_final_model=false", *args.overrides])
    steps = [row for row in metric_rows(run_dir) if row["step"] > 0]
    shutil.rmtree(run_dir)
    breakdown = step_breakdown(steps)  # steps 2 on, as profiled
    result = {"steps_profiled": len(steps) - 1, "profiler": args.profiler, "breakdown": breakdown}
    for key, value in breakdown.items():
        print(f"{key:36} {value:12.4g}")
    if args.profiler == "cprofile":
        stats = pstats.Stats(profiler)
        result |= {"by_cumulative": table(stats, "cumulative"), "by_own_time": table(stats, "tottime")}
        for row in result["by_own_time"][:15]:
            print(f"{row['own_s']:8.3f} s own  {row['cumulative_s']:8.3f} s cum  {row['calls']:7d}  {row['function']}")
    else:
        result |= profiler.tables()
        print(f"device busy {result['device_busy_s']:.3f} s of {result['wall_s']:.3f} s wall "
              f"({result['device_busy_fraction']:.0%})")
        for row in result["by_own_device_time"][:15] + result["by_own_host_time"][:15]:
            print(f"{row['own_device_s']:8.3f} s device  {row['own_host_s']:8.3f} s host  {row['calls']:7d}  "
                  f"{row['operator']}")
    if args.out:
        with open(args.out, "w") as handle:
            json.dump(result, handle, indent=1)


if __name__ == "__main__":
    main()
