"""LoRA (merged and adapter-only sync) against full fine-tuning on the main job's shape, one after the other.

Each variant is the main job (``rlloom train``: SmolLM2-135M-Instruct, single-digit addition, 4 prompts x 8
samples, <= 16 new tokens; ``--model tiny`` for the small random model) for ``--steps`` steps without
validation, in its own fresh subprocess so that each has its own memory peak, with a KL loss by default
(``--no-kl``: without), so that the full fine-tuning run builds a reference engine and the LoRA run serves
the reference from its actor with the adapters off:

- ``full``: every weight trains (``train_engine.lr=1e-5``, the main job's);
- ``lora``: ``train_engine.lora.rank=16``, ``alpha=32``, ``all-linear``, ``train_engine.lr=2e-4`` (docs/lora.md),
  each sync sending the merged weights (``resharder.lora_sync=merged``);
- ``lora_adapter``: the same with ``resharder.lora_sync=adapter`` (the base weights at the first sync, then the
  adapters alone), which needs ``rollout=vllm`` (``rollout.max_lora_rank=16``): with ``--rollout hf`` it is left out.

Every variant uses the rollout engine ``--rollout`` (default ``vllm``, so that the three compare). Reported per
variant: the peak memory of the run's process (``perf/cpu_memory_peak_gb``: resident set on the CPU; on CUDA
``perf/max_memory_allocated_gb``), the median step time (``timing_s/step``, the first step left out), the bytes
the first and the last weight sync moved (``perf/weight_sync_bytes``), with the ratios to ``full``; and each
step's mean training reward (``critic/score/mean``), a first look at whether the variant learns.

    python bench/bench_lora.py                         # CPU, SmolLM2-135M, rollout=vllm, 4 steps each
    python bench/bench_lora.py --device cuda --steps 6 --out lora.json
    python bench/bench_lora.py --rollout hf --lora train_engine.gradient_checkpointing=true
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile

from rlloom_trainer.testing import metric_rows

LORA = ["train_engine.lora.rank=16", "train_engine.lora.alpha=32", "train_engine.lr=2e-4"]
VARIANTS = {"full": [], "lora": LORA,
            "lora_adapter": [*LORA, "rollout.max_lora_rank=16", "resharder.lora_sync=adapter"]}


def run_variant(name: str, args: argparse.Namespace, folder: str) -> dict:
    """One ``rlloom train`` of the variant in a subprocess; its numbers from ``metrics.jsonl``."""
    run_dir = os.path.join(folder, name)
    overrides = [f"trainer.run_dir={run_dir}", f"trainer.total_steps={args.steps}", f"trainer.device={args.device}",
                 "trainer.val_before_train=false", "trainer.test_freq=0", "trainer.val_max_prompts=1",
                 "trainer.val_n=1", "trainer.save_final_model=false", "trainer.trackers=[jsonl]",
                 f"algorithm.use_kl_loss={str(args.kl).lower()}", f"rollout={args.rollout}", *VARIANTS[name],
                 *(args.lora if name != "full" else [])]
    if args.model == "tiny":
        overrides.append("preset=tiny")
    cli = "import sys; from rlloom.cli import main; sys.exit(main(sys.argv[1:]))"
    subprocess.run([sys.executable, "-c", cli, "train", *overrides], check=True, stdout=subprocess.DEVNULL)
    steps = [row for row in metric_rows(run_dir) if row["step"] > 0 and "timing_s/step" in row]
    memory_key = "perf/cpu_memory_peak_gb" if args.device == "cpu" else "perf/max_memory_allocated_gb"
    return {"peak_gb": max(row.get(memory_key, 0.0) for row in steps),
            "step_s": statistics.median(row["timing_s/step"] for row in steps[1:] or steps),
            "first_sync_bytes": steps[0]["perf/weight_sync_bytes"],
            "sync_bytes": steps[-1]["perf/weight_sync_bytes"],
            "reference_memory_saved_gb": steps[-1].get("perf/reference_memory_saved_gb"),
            "train_score": [round(row["critic/score/mean"], 3) for row in steps]}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", choices=["smollm2-135m", "tiny"], default="smollm2-135m")
    parser.add_argument("--device", default="cpu", help="cpu or cuda")
    parser.add_argument("--steps", type=int, default=4)
    parser.add_argument("--rollout", choices=["vllm", "hf"], default="vllm", help="every variant's rollout engine")
    parser.add_argument("--no-kl", dest="kl", action="store_false", help="no KL loss (no reference policy at all)")
    parser.add_argument("--lora", action="append", default=[], metavar="OVERRIDE",
                        help="another override for the LoRA run (repeatable), e.g. train_engine.gradient_checkpointing=true")
    parser.add_argument("--out", help="write the numbers to this JSON file")
    args = parser.parse_args()
    names = [name for name in VARIANTS if args.rollout == "vllm" or name != "lora_adapter"]
    with tempfile.TemporaryDirectory() as folder:
        results = {name: run_variant(name, args, folder) for name in names}
    full = results["full"]
    ratios = {name: {"peak_memory": result["peak_gb"] / full["peak_gb"], "step_time": result["step_s"] / full["step_s"],
                     "sync_bytes": result["sync_bytes"] / full["sync_bytes"]}
              for name, result in results.items() if name != "full"}
    report = {"model": args.model, "device": args.device, "rollout": args.rollout, "steps": args.steps, "kl": args.kl,
              "lora_overrides": LORA + args.lora, **results, "over_full": ratios}
    print(json.dumps(report, indent=2))
    if args.out:
        with open(args.out, "w", encoding="utf-8") as handle:
            json.dump(report, handle, indent=2)


if __name__ == "__main__":
    main()
