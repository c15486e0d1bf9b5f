"""Step time of the same tiny run under ``launcher=local`` and ``launcher=ray`` (colocated, split
placement, and every model role on a pool of its own), and the controller's own share of a step.

Each mode runs ``preset=tiny`` for ``--steps`` steps (validation off) in a fresh run directory;
the first step (warm-up) is left out of the medians. Per mode it prints the median
``timing_s/step``; the controller's own time per step: ``timing_s/step`` minus the time spent
waiting on workers (generate, update, weight sync, and the stages of the step's concurrent block —
reward and log-probs — by the block's wall time ``timing_s/concurrent``), i.e. decoding,
advantages, batch bookkeeping and, under Ray, the serialisation and dispatch of each call; and
``concurrent_s``, the wall time of that block, and ``overlap_s``, how much of its stages ran at the same time
(``perf/concurrent_overlap_s``: 0 in one process; with ``ray-pools`` the reference model and the
critic work beside the actor). Everything outside the steps (start-up of Ray, placement groups
and workers, model build, checkpoint, shutdown) is ``other_s``.

    python bench/bench_launchers.py --steps 6                    # GRPO (actor + rollout)
    python bench/bench_launchers.py --steps 6 --algorithm ppo    # PPO with reference and critic
    python bench/bench_launchers.py --algorithm ppo --size small --modes local ray-pools
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import tempfile
import time

import rlloom_trainer
import torch

WAITED_STAGES = ("gen", "concurrent", "update_actor", "update_critic", "update_weights")
SPLIT = ["+launcher.resource_pools.gen=1", "+launcher.mapping.rollout=gen", "resharder=broadcast"]
MODES = {
    "local": ["launcher=local", "launcher.num_threads=1"],
    "ray-colocated": ["launcher=ray"],
    "ray-split": ["launcher=ray", *SPLIT],
    "ray-pools": ["launcher=ray", *SPLIT, "+launcher.resource_pools.ref_pool=1", "+launcher.mapping.ref=ref_pool",
                  "+launcher.resource_pools.critic_pool=1", "+launcher.mapping.critic=critic_pool"],
}
SIZES = {
    "tiny": [],
    # a model big enough that the reference and critic passes take longer than a dispatch
    "small": ["model.hidden_size=256", "model.num_layers=4", "model.num_heads=4", "model.intermediate_size=768",
              "sampling.max_new_tokens=16"],
}
ALGORITHMS = {
    "grpo": [],
    "ppo": ["algorithm=ppo", "algorithm.use_kl_loss=true", "algorithm.critic_warmup=0"],
}


def run(mode: str, algorithm: str, size: str, steps: int, cache: str, num_cpus: int) -> dict[str, float]:
    overrides = MODES[mode] + ALGORITHMS[algorithm] + SIZES[size]
    if mode != "local":
        overrides.append(f"launcher.num_cpus={num_cpus}")
    with tempfile.TemporaryDirectory() as run_dir:
        start = time.perf_counter()
        rlloom_trainer.train(["preset=tiny", f"trainer.total_steps={steps}", f"trainer.run_dir={run_dir}",
                              f"model.cache_dir={cache}", "trainer.trackers=[jsonl]", "trainer.val_before_train=false",
                              "trainer.test_freq=0", *overrides])
        total = time.perf_counter() - start
        with open(os.path.join(run_dir, "metrics.jsonl"), encoding="utf-8") as f:
            every = [json.loads(line) for line in f]
    rows = every[1:]  # the first step warms up
    step = [row["timing_s/step"] for row in rows]
    own = [row["timing_s/step"] - sum(row.get(f"timing_s/{stage}", 0.0) for stage in WAITED_STAGES) for row in rows]
    return {"step_s": statistics.median(step), "controller_s": statistics.median(own),
            "concurrent_s": statistics.median(row["timing_s/concurrent"] for row in rows),
            "overlap_s": statistics.median(row["perf/concurrent_overlap_s"] for row in rows),
            "other_s": total - sum(row["timing_s/step"] for row in every)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=6)
    parser.add_argument("--num-cpus", type=int, default=4, help="logical CPUs of the local Ray cluster")
    parser.add_argument("--modes", nargs="+", default=list(MODES), choices=list(MODES))
    parser.add_argument("--algorithm", default="grpo", choices=list(ALGORITHMS))
    parser.add_argument("--size", default="tiny", choices=list(SIZES), help="model size (tiny preset or larger)")
    args = parser.parse_args()
    os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")
    torch.set_num_threads(1)
    with tempfile.TemporaryDirectory() as cache:
        results = {mode: run(mode, args.algorithm, args.size, args.steps, cache, args.num_cpus) for mode in args.modes}
    print(f"{args.algorithm}: {'mode':<15}{'step_s':>10}{'controller_s':>14}{'concurrent_s':>14}{'overlap_s':>11}"
          f"{'other_s':>11}")
    for mode, result in results.items():
        print(f"{'':<{len(args.algorithm) + 2}}{mode:<15}{result['step_s']:>10.3f}{result['controller_s']:>14.3f}"
              f"{result['concurrent_s']:>14.3f}{result['overlap_s']:>11.3f}{result['other_s']:>11.1f}")
    if "local" in results:
        for mode in results:
            if mode != "local":
                extra = results[mode]["step_s"] - results["local"]["step_s"]
                print(f"{mode}: {extra * 1000:+.0f} ms per step over local")


if __name__ == "__main__":
    main()
