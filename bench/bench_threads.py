"""Thread over-subscription: train engines in separate processes sharing the machine's cores.

Each process builds an FSDP train engine (world size 1) and times ``--steps`` train steps on the
same GRPO-shaped batch as ``bench_train_step.py``; all processes start together. Three placements:

- one process with every core (the baseline);
- ``--processes`` processes with threads from :mod:`rlloom_enginekit.threads` (cores / processes each, what
  ``launcher.threads_per_worker=0`` gives workers reserving that many CPUs);
- the same processes with every core each (what torch does by default: over-subscribed).

Printed: the median step time per placement and the throughput (steps/s summed over processes)
relative to the baseline.

    python bench/bench_threads.py --model smollm2-135m --processes 2
"""

from __future__ import annotations

import argparse
import multiprocessing
import statistics
import time

import torch

from rlloom_enginekit.threads import available_cores, use_threads


def timed_steps(path: str, threads: int, steps: int, start, results) -> None:
    """One process: build the engine, wait for the others, time ``steps`` train steps."""
    from bench_train_step import build_engine, make_batch, pg_loss

    use_threads(threads)
    engine = build_engine("fsdp", path, 16, "shared_prompt", steps, torch.device("cpu"), recompute=False)
    batch = make_batch(32, 8, 45, 16, engine.vocab_size, ragged=True)
    engine.train_step(batch, pg_loss)  # warm-up
    start.wait()
    times = []
    for _ in range(steps):
        began = time.perf_counter()
        engine.train_step(batch, pg_loss)
        times.append(time.perf_counter() - began)
    engine.close()
    results.put(statistics.median(times))


def placement(path: str, processes: int, threads: int, steps: int) -> list[float]:
    """Median step time of each of ``processes`` processes running at once with ``threads`` each."""
    context = multiprocessing.get_context("spawn")
    start, results = context.Barrier(processes), context.Queue()
    workers = [context.Process(target=timed_steps, args=(path, threads, steps, start, results))
               for _ in range(processes)]
    for worker in workers:
        worker.start()
    medians = [results.get() for _ in workers]
    for worker in workers:
        worker.join()
    return medians


def main() -> None:
    from bench_train_step import model_path

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", choices=["tiny", "smollm2-135m"], default="tiny")
    parser.add_argument("--processes", type=int, default=2)
    parser.add_argument("--steps", type=int, default=3)
    args = parser.parse_args()
    path, cores = model_path(args.model), available_cores()
    print(f"model={args.model} cores={cores} processes={args.processes} steps={args.steps}")
    alone = placement(path, 1, cores, args.steps)[0]
    print(f"{f'1 process x {cores} threads':34}: {alone:7.2f} s/step  throughput 1.00")
    shared = max(1, cores // args.processes)
    for threads in (shared, cores):
        medians = placement(path, args.processes, threads, args.steps)
        throughput = sum(alone / median for median in medians)
        label = f"{args.processes} processes x {threads} threads each"
        print(f"{label:34}: {statistics.median(medians):7.2f} s/step  throughput {throughput:.2f}")


if __name__ == "__main__":
    main()
