"""LoRA (merged and adapter-only sync) against full fine-tuning on the main job's shape, with and without gradient
checkpointing, one after the other.

Each variant is the main job (``rlloom train``: SmolLM2-135M-Instruct, single-digit addition, 4 prompts x 8
samples, <= 16 new tokens; ``--model tiny`` for the small random model) for ``--steps`` steps without
validation, in its own fresh subprocess (``bench/memory_stages.py``) so that each has its own memory peak, with a
KL loss by default (``--no-kl``: without), so that the full fine-tuning run builds a reference engine and the LoRA
run serves the reference from its actor with the adapters off:

- ``full``: every weight trains (``train_engine.lr=1e-5``), the main job as it is;
- ``full_gc``: the same with ``train_engine.gradient_checkpointing=true``;
- ``lora``: ``preset=lora``'s LoRA settings (``rlloom_fsdp.plugin.LORA_PRESET``: rank 16, alpha 32, ``all-linear``,
  ``train_engine.lr=2e-4``) without gradient checkpointing, each sync sending the merged weights;
- ``lora_gc``: ``preset=lora`` as it is (gradient checkpointing on), merged sync;
- ``lora_adapter``: ``lora_gc`` with ``resharder.lora_sync=adapter`` (the base weights at the first sync, then the
  adapters alone), which needs ``rollout=vllm`` (``rollout.max_lora_rank=16``): with ``--rollout hf`` it is left out.

Every variant uses the rollout engine ``--rollout`` (default ``vllm``, so that all compare). Reported per variant:
the peak memory of the run's process (``perf/cpu_memory_peak_gb``: resident set on the CPU; on CUDA
``perf/max_memory_allocated_gb``), where the process's resident set peaked (``peak_stage`` and ``stage_peak_gb``:
the highest resident set per step stage, ``built_gb``: what it held before the first step; ``bench/memory_stages.py``),
the median step time (``timing_s/step``, the first step left out), the bytes the first and the last weight sync
moved (``perf/weight_sync_bytes``); the ratios of each variant to ``full`` and to the full run with the same
gradient checkpointing (``over_full``, ``over_full_same_gc``); and each step's mean training reward
(``critic/score/mean``), a first look at whether the variant learns.

    python bench/bench_lora.py --steps 3               # CPU, SmolLM2-135M, rollout=vllm, the five variants
    python bench/bench_lora.py --device cuda --steps 6 --out lora.json
    python bench/bench_lora.py --rollout hf --lora train_engine.lora.rank=8
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile

from rlloom_fsdp.plugin import LORA_PRESET
from rlloom_trainer.testing import metric_rows

GC = "train_engine.gradient_checkpointing=true"
LORA = [override for override in LORA_PRESET if not override.startswith(("trainer.run_name=", GC))]
VARIANTS = {"full": [], "full_gc": [GC], "lora": LORA, "lora_gc": [*LORA, GC],
            "lora_adapter": [*LORA, GC, "rollout.max_lora_rank=16", "resharder.lora_sync=adapter"]}
STAGES = os.path.join(os.path.dirname(os.path.abspath(__file__)), "memory_stages.py")


def run_variant(name: str, args: argparse.Namespace, folder: str) -> dict:
    """One ``rlloom train`` of the variant in a subprocess; its numbers from ``metrics.jsonl`` and the resident
    set per stage (:mod:`memory_stages`)."""
    run_dir, stages = os.path.join(folder, name), os.path.join(folder, f"{name}-stages.json")
    overrides = [f"trainer.run_dir={run_dir}", f"trainer.total_steps={args.steps}", f"trainer.device={args.device}",
                 "trainer.val_before_train=false", "trainer.test_freq=0", "trainer.val_max_prompts=1",
                 "trainer.val_n=1", "trainer.save_final_model=false", "trainer.trackers=[jsonl]",
                 f"algorithm.use_kl_loss={str(args.kl).lower()}", f"rollout={args.rollout}", *VARIANTS[name],
                 *(args.lora if name.startswith("lora") else [])]
    if args.model == "tiny":
        overrides.append("preset=tiny")
    subprocess.run([sys.executable, STAGES, "--out", stages, *overrides], check=True, stdout=subprocess.DEVNULL)
    steps = [row for row in metric_rows(run_dir) if row["step"] > 0 and "timing_s/step" in row]
    memory_key = "perf/cpu_memory_peak_gb" if args.device == "cpu" else "perf/max_memory_allocated_gb"
    with open(stages, encoding="utf-8") as handle:
        resident = json.load(handle)
    return {"gradient_checkpointing": GC in VARIANTS[name], "peak_gb": max(row.get(memory_key, 0.0) for row in steps),
            "peak_stage": resident["peak_stage"], "built_gb": round(resident["built_gb"], 3),
            "stage_peak_gb": resident["stage_peak_gb"],
            "step_s": statistics.median(row["timing_s/step"] for row in steps[1:] or steps),
            "first_sync_bytes": steps[0]["perf/weight_sync_bytes"],
            "sync_bytes": steps[-1]["perf/weight_sync_bytes"],
            "reference_memory_saved_gb": steps[-1].get("perf/reference_memory_saved_gb"),
            "train_score": [round(row["critic/score/mean"], 3) for row in steps]}


def ratios(result: dict, full: dict) -> dict:
    """``result``'s peak memory, step time and later-sync bytes over ``full``'s."""
    return {"peak_memory": round(result["peak_gb"] / full["peak_gb"], 3),
            "step_time": round(result["step_s"] / full["step_s"], 3),
            "sync_bytes": round(result["sync_bytes"] / full["sync_bytes"], 4)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", choices=["smollm2-135m", "tiny"], default="smollm2-135m")
    parser.add_argument("--device", default="cpu", help="cpu or cuda")
    parser.add_argument("--steps", type=int, default=3)
    parser.add_argument("--rollout", choices=["vllm", "hf"], default="vllm", help="every variant's rollout engine")
    parser.add_argument("--no-kl", dest="kl", action="store_false", help="no KL loss (no reference policy at all)")
    parser.add_argument("--lora", action="append", default=[], metavar="OVERRIDE",
                        help="another override for the LoRA runs (repeatable), e.g. train_engine.lora.rank=8")
    parser.add_argument("--out", help="write the numbers to this JSON file")
    args = parser.parse_args()
    names = [name for name in VARIANTS if args.rollout == "vllm" or name != "lora_adapter"]
    with tempfile.TemporaryDirectory() as folder:
        results = {name: run_variant(name, args, folder) for name in names}
    full = {gc: results["full_gc" if gc else "full"] for gc in (False, True)}
    report = {"model": args.model, "device": args.device, "rollout": args.rollout, "steps": args.steps, "kl": args.kl,
              "lora_overrides": LORA + args.lora, **results,
              "over_full": {name: ratios(result, full[False]) for name, result in results.items() if name != "full"},
              "over_full_same_gc": {name: ratios(result, full[result["gradient_checkpointing"]])
                                    for name, result in results.items() if name.startswith("lora")}}
    print(json.dumps(report, indent=2))
    if args.out:
        with open(args.out, "w", encoding="utf-8") as handle:
            json.dump(report, handle, indent=2)


if __name__ == "__main__":
    main()
