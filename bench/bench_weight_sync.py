"""Colocated weight sync (``resharder=in_process``: FSDP2 actor → HF rollout engine on one device)
against a plain device-to-device copy of the same bytes, in the same run.

The sync gathers each full parameter from the train engine (on the engine's device: a GPU's never
go through host memory) and copies it into the rollout model, casting to the rollout's dtype. The
baseline copies the same tensors, already materialised on the device, into preallocated tensors of
the rollout's dtype (one ``copy_`` per tensor): the floor a sync cannot beat on that device.

    python bench/bench_weight_sync.py --device cuda --model smollm2-135m
    python bench/bench_weight_sync.py --device cpu            # the small random model
"""

from __future__ import annotations

import argparse
import json
import statistics
import time

import torch

from rlloom import EngineSpec
from rlloom.choices import resolve_device
from rlloom_enginekit.devices import synchronize
from rlloom_enginekit.resharder import InProcessResharder, InProcessResharderConfig
from rlloom_fsdp.config import FSDPConfig
from rlloom_fsdp.engine import FSDPTrainEngine
from rlloom_hf import HFRolloutConfig, HFRolloutEngine

from bench_train_step import model_path


def timed(device: torch.device, action) -> float:
    synchronize(device)
    start = time.perf_counter()
    action()
    synchronize(device)
    return time.perf_counter() - start


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", choices=["tiny", "smollm2-135m"], default="tiny")
    parser.add_argument("--device", default="auto", help="auto, cpu or cuda")
    parser.add_argument("--rollout-dtype", default="auto", help="auto: bfloat16 on CUDA, float32 on CPU")
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--out", help="write the timings to this JSON file")
    args = parser.parse_args()
    device = resolve_device(args.device, "--device")
    path = model_path(args.model)
    actor = FSDPTrainEngine(FSDPConfig(), EngineSpec(path, "actor", 0, 1, str(device)))
    rollout = HFRolloutEngine(HFRolloutConfig(dtype=args.rollout_dtype), EngineSpec(path, "rollout", 0, 0, str(device)))
    resharder = InProcessResharder(InProcessResharderConfig())

    stats = [resharder.sync(actor, rollout)]
    sync_times = [timed(device, lambda: stats.append(resharder.sync(actor, rollout))) for _ in range(args.repeats)]
    sources = [tensor for _, tensor in actor.named_weights()]
    dtype = next(rollout.model.parameters()).dtype
    targets = [torch.empty(tensor.shape, dtype=dtype, device=tensor.device) for tensor in sources]

    def copy_all() -> None:
        for target, source in zip(targets, sources):
            target.copy_(source)

    copy_all()
    copy_times = [timed(device, copy_all) for _ in range(args.repeats)]
    gigabytes = stats[-1].num_bytes / 1e9
    sync, copy = statistics.median(sync_times), statistics.median(copy_times)
    print(f"model={args.model} device={device} tensors={stats[-1].num_tensors} "
          f"bytes={stats[-1].num_bytes / 1e6:.1f} MB (float32 master weights) rollout dtype={dtype}")
    print(f"in_process sync          : {sync * 1e3:8.1f} ms  {gigabytes / sync:7.1f} GB/s")
    print(f"device copy, same bytes  : {copy * 1e3:8.1f} ms  {gigabytes / copy:7.1f} GB/s")
    print(f"ratio sync / copy        : {sync / copy:.2f}")
    if args.out:
        with open(args.out, "w") as handle:
            json.dump(dict(model=args.model, device=str(device), bytes=stats[-1].num_bytes, sync_s=sync, copy_s=copy,
                           sync_gb_per_s=gigabytes / sync, ratio_sync_to_copy=sync / copy), handle)
    actor.close()
    rollout.close()


if __name__ == "__main__":
    main()
