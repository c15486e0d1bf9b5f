"""Where a training step's wall time goes: ``rlloom train`` under cProfile, in this process.

Runs the quickstart (the default config: SmolLM2, 4 prompts x 8 samples, 16 new tokens) for
``--steps`` steps without validation, profiles only steps 2 to ``--steps`` (model loading,
conversion and the first step's warm-up left out) and prints the functions that took the most wall
time, by cumulative and by own time. On a GPU a host wait (``.item()``, ``.tolist()``, a
synchronize) shows as time in that call, so the tables also say where the host waits for the
device. ``--out`` writes them as JSON with the steps' median ``timing_s/*`` and ``perf/*``
(:func:`bench_vs_trl.step_breakdown`).

    python bench/profile_train.py --device cuda --steps 6 --out profile.json
    python bench/profile_train.py --device cpu --steps 3 preset=tiny     # extra args: Hydra overrides
"""

from __future__ import annotations

import argparse
import cProfile
import json
import pstats
import tempfile

import rlloom_trainer
from rlloom_trainer.testing import metric_rows
from rlloom_trainer.trainer import Trainer

from bench_vs_trl import step_breakdown

TOP = 30


def profile_steps(profiler: cProfile.Profile, first: int, last: int) -> None:
    """Make the trainer's ``log`` switch ``profiler`` on once step ``first`` is logged and off once
    step ``last`` is: the steps in between are profiled, nothing before or after them."""
    log = Trainer.log

    def logged(trainer: Trainer, metrics: dict[str, float], step: int) -> None:
        log(trainer, metrics, step)
        if step == first:
            profiler.enable()
        elif step == last:
            profiler.disable()

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


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--device", default="auto")
    parser.add_argument("--steps", type=int, default=6)
    parser.add_argument("--out", help="write the tables and the step breakdown to this JSON file")
    parser.add_argument("overrides", nargs="*", help="Hydra overrides for rlloom train")
    args = parser.parse_args()
    if args.steps < 2:
        parser.error("--steps: at least 2 (the first step is left out of the profile)")
    run_dir = tempfile.mkdtemp(prefix="rlloom-profile-")
    profiler = cProfile.Profile()
    profile_steps(profiler, first=1, last=args.steps)
    rlloom_trainer.train([f"trainer.device={args.device}", f"trainer.run_dir={run_dir}", "trainer.trackers=[jsonl]",
                          f"trainer.total_steps={args.steps}", "trainer.val_before_train=false", "trainer.test_freq=0",
                          "trainer.save_final_model=false", *args.overrides])
    stats = pstats.Stats(profiler)
    steps = [row for row in metric_rows(run_dir) if row["step"] > 0]
    breakdown = step_breakdown(steps)  # steps 2 on, as profiled
    result = {"steps_profiled": len(steps) - 1, "breakdown": breakdown, "by_cumulative": table(stats, "cumulative"),
              "by_own_time": table(stats, "tottime")}
    for key, value in breakdown.items():
        print(f"{key:36} {value:12.4g}")
    for row in result["by_own_time"][:15]:
        print(f"{row['own_s']:8.3f} s own  {row['cumulative_s']:8.3f} s cum  {row['calls']:7d}  {row['function']}")
    if args.out:
        with open(args.out, "w") as handle:
            json.dump(result, handle, indent=1)


if __name__ == "__main__":
    main()
