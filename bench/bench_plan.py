"""``rlloom plan``'s step-time model against measured step times on this machine (issue 37 item 4).

1. This machine as a cluster: one node of ``os.sched_getaffinity`` CPU devices (one core, one torch thread
   each), its memory shared out, and the loopback gloo bandwidth between two processes measured here
   (a broadcast of 64 MiB, the best of 3) as its link bandwidth; written to ``<out>/cluster.yaml``.
2. A profile of one configuration (``rlloom plan --profile``'s :func:`run_profile`): GRPO with the reference
   on (``algorithm.use_kl_loss=true``), colocated on one Ray worker at ``--profile-batch`` prompts and half
   of them, then the same on two workers (the pool scaling); written to ``<out>/profile.json``.
3. Another configuration, ``--batch`` prompts, predicted from that profile (:func:`predict`) and run for
   ``--steps`` steps in every placement that fits here: colocated on 1 and on 2 workers, split 1 + 1
   (``resharder=broadcast``), sync, and split 1 + 1 with ``trainer.async_mode=one_step_off`` (generation
   overlapping training). A run's measurement is its quickest step after the first, and each stage's
   quickest sample (other processes only ever add time; the profile takes its samples alike).
4. Prints each placement's predicted and measured step time and stages, the error, the sync placement the
   model picks (the least predicted; a plan keeps the config's async mode) and the fastest measured, the
   wall time and ``uptime``'s load; writes ``<out>/results.json``.

    python bench/bench_plan.py                  # 8 Ray runs of 5 steps
    python bench/bench_plan.py --hidden 512     # a model whose per-token work outweighs the fixed costs
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import tempfile
import time

import torch
import torch.distributed as dist
import torch.multiprocessing as mp
import yaml
from rlloom.config import compose_config
from rlloom_trainer.commands.plan import config_keys
from rlloom_trainer.planning.hardware import parse_cluster
from rlloom_trainer.planning.profile import Profile, profile_run, quickest, quickest_step, run_profile, stage_samples
from rlloom_trainer.planning.rates import plan_rates, plan_workload
from rlloom_trainer.planning.search import on_gpu, overrides
from rlloom_trainer.planning.steptime import Placement, predict

CONFIG = ["preset=tiny", "model.num_layers=4", "model.num_heads=4", "model.num_kv_heads=2",
          "sampling.max_new_tokens=24", "algorithm.use_kl_loss=true", "train_engine.max_tokens_per_micro_batch=4096"]
PLACEMENTS = {"colocated 1": (Placement(1), "sync"), "colocated 2": (Placement(2), "sync"),
              "split 1+1": (Placement(1, 1), "sync"), "split 1+1 async": (Placement(1, 1), "one_step_off")}
BROADCAST_BYTES = 64 * 2**20


def _broadcast(rank: int, port: int, queue) -> None:
    torch.set_num_threads(1)
    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=2)
    tensor = torch.zeros(BROADCAST_BYTES // 4)
    best = float("inf")
    for _ in range(3):
        dist.barrier()
        start = time.perf_counter()
        dist.broadcast(tensor, src=0)
        best = min(best, time.perf_counter() - start)
    if rank == 1:
        queue.put(BROADCAST_BYTES / best)
    dist.destroy_process_group()


def link_bandwidth(port: int = 29533) -> float:
    """Bytes/s of a gloo broadcast between two processes of this machine (best of 3)."""
    context = mp.get_context("spawn")
    queue = context.Queue()
    context_processes = [context.Process(target=_broadcast, args=(rank, port, queue)) for rank in range(2)]
    for process in context_processes:
        process.start()
    bandwidth = queue.get(timeout=120)
    for process in context_processes:
        process.join()
    return bandwidth


def write_cluster(path: str) -> None:
    cores = len(os.sched_getaffinity(0))
    memory = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    bandwidth = link_bandwidth()
    cluster = {"nodes": 1, "devices_per_node": cores, "network_bandwidth": bandwidth,
               "device": {"name": "cpu", "bf16_flops": 1.0e11, "memory_bytes": float(memory // cores),
                          "memory_bandwidth": 1.0e10, "link_bandwidth": bandwidth}}
    with open(path, "w", encoding="utf-8") as handle:
        yaml.safe_dump(cluster, handle)


def measure(placement: Placement, async_mode: str, keys: set[str], batch: int, steps: int,
            cache: str) -> tuple[float, dict[str, float]]:
    """(the quickest ``timing_s/step`` after the first of ``steps`` steps of the config in ``placement``,
    each stage's quickest seconds: the samples other processes disturbed least, as the profile takes them)."""
    rows, _ = profile_run([*CONFIG, *overrides(placement, keys, gpu=False), "launcher.num_cpus=2",
                           f"model.cache_dir={cache}", f"trainer.async_mode={async_mode}"], batch, steps)
    n = compose_config(CONFIG).sections["algorithm"].n
    stages = {stage: values[0][1] for stage, values in quickest(stage_samples(rows, batch * n)).items() if values}
    return quickest_step(rows), stages


def run(args: argparse.Namespace, cluster_path: str) -> tuple[Profile, dict]:
    """Profile the config at ``--profile-batch``, then predict and measure every placement at ``--batch``."""
    cluster = parse_cluster(cluster_path)
    with tempfile.TemporaryDirectory() as cache:
        profile = run_profile([*CONFIG, "launcher=ray", "launcher.num_cpus=2", f"model.cache_dir={cache}",
                               f"trainer.train_batch_size={args.profile_batch}"], args.steps)
        with open(os.path.join(args.out, "profile.json"), "w", encoding="utf-8") as handle:
            json.dump(profile.to_json(), handle, indent=1)
        resolved = compose_config([*CONFIG, f"trainer.train_batch_size={args.batch}"])
        keys = config_keys(resolved)
        workload = plan_workload(resolved, profile.shape, profile, prompt_tokens=0, gpu=on_gpu(cluster))
        rates = plan_rates(profile.shape, cluster, profile)
        results = {}
        for name, (placement, async_mode) in PLACEMENTS.items():
            prediction = predict(placement, profile.shape, workload, rates, cluster, async_mode)
            measured, stages = measure(placement, async_mode, keys, args.batch, args.steps, cache)
            results[name] = {"predicted_s": prediction.step_s, "measured_s": measured,
                             "error": prediction.step_s / measured - 1, "predicted_stages": prediction.stages,
                             "measured_stages": stages}
    return profile, {"rates_source": rates.source, "placements": results}


def report(results: dict, load: str, wall: float) -> None:
    """Print the placements' predicted and measured step times and stages, the pick and the fastest."""
    placements = results["placements"]
    print(f"rates: {results['rates_source']}")
    print(f"{'placement':<16} {'predicted':>10} {'measured':>10} {'error':>7}   stages predicted / measured (s)")
    for name, row in placements.items():
        stages = "  ".join(f"{stage} {row['predicted_stages'].get(stage, 0):.3f}/{seconds:.3f}"
                           for stage, seconds in row["measured_stages"].items())
        print(f"{name:<16} {row['predicted_s']:>9.3f}s {row['measured_s']:>9.3f}s {row['error']:>+7.1%}   {stages}")
    print(f"of the sync placements (the config's mode) the model picks: {results['plan_picks']}; fastest measured: "
          f"{results['fastest_measured']}")
    print(f"wall: {wall:.0f} s; uptime: {load}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--profile-batch", type=int, default=8)
    parser.add_argument("--batch", type=int, default=6)
    parser.add_argument("--steps", type=int, default=5, help="steps per run (the first is not timed)")
    parser.add_argument("--hidden", type=int, default=256, help="the tiny model's width (its MLP: 3x)")
    parser.add_argument("--out", default="bench-plan")
    args = parser.parse_args()
    started = time.perf_counter()
    CONFIG.extend([f"model.hidden_size={args.hidden}", f"model.intermediate_size={3 * args.hidden}"])
    os.makedirs(args.out, exist_ok=True)
    cluster_path = os.path.join(args.out, "cluster.yaml")
    write_cluster(cluster_path)
    profile, results = run(args, cluster_path)
    placements = results["placements"]
    synchronous = [name for name, (_, async_mode) in PLACEMENTS.items() if async_mode == "sync"]
    results["plan_picks"] = min(synchronous, key=lambda name: placements[name]["predicted_s"])
    results["fastest_measured"] = min(synchronous, key=lambda name: placements[name]["measured_s"])
    load = subprocess.run(["uptime"], capture_output=True, text=True).stdout.strip()
    with open(cluster_path, encoding="utf-8") as handle:
        cluster_text = handle.read()
    summary = {"cluster": cluster_text, "profile_step_s": profile.step_s, "profile_doubled_step_s":
               profile.doubled_step_s, "profile_threads": profile.threads, "rates": profile.to_json()["rates"],
               **results, "uptime": load, "wall_s": time.perf_counter() - started}
    with open(os.path.join(args.out, "results.json"), "w", encoding="utf-8") as handle:
        json.dump(summary, handle, indent=1)
    report(results, load, summary["wall_s"])


if __name__ == "__main__":
    main()
