"""A train engine's optimizer step (FSDP2, or ``--engine megatron``) vs a plain transformers + AdamW
step, in the same run.

Workload: one GRPO-shaped mini-batch — B responses of R tokens, ``n`` per prompt of P tokens (random
ids) — on a model folder (default: a small random model; ``--model smollm2-135m`` for the main job's
model). Baseline: the same model loaded with transformers, one forward over the concatenated prompt +
response tokens (logits only for the response slice), a token-mean policy-gradient loss, backward,
``AdamW.step``: what a trainer without prompt sharing computes. The engine runs with its defaults
(FSDP2 at world size 1, micro-batches, ``sequence_layout=shared_prompt``: padding dropped, each
distinct prompt once); ``--layout padded`` measures its overhead on the same work as the baseline
instead. ``--ragged``: response lengths drawn uniformly from 1 … R (the rest padding), as sampled
responses are. ``--engine megatron``:
the megatron-core engine at tensor-parallel size 1 (no prompt sharing). ``--gradient-checkpointing``: the
engine recomputes each layer's activations in backward (the baseline does not). ``--device cuda``:
both on the GPU in the engine's default precision there (bf16 compute; the baseline autocasts to
bf16 with float32 weights, the usual way a plain PyTorch loop trains in mixed precision).
``--attention flex``: the engine's packed layouts compute attention with FlexAttention over a block
mask (``train_engine.attention``; compiled on a GPU during the first, untimed step: its time is
reported as the warm-up); ``--attention varlen``: causal SDPA on each packed sequence, no mask.
``--out FILE``: the numbers as JSON.

``--sequence-parallel N``: instead of the comparison with plain transformers, the FSDP engine's step
at ``train_engine.sequence_parallel_size=1`` in one process against N in N processes (one
sequence-parallel group; gloo on the CPU, NCCL on N GPUs), each rank's peak memory during its second
step and the step's time, with the ``--attention`` given (both sizes). Two peaks per rank: ``total``,
beyond what the process held before the engine was built (weights, gradients, optimizer state, activations; on the CPU also the code and buffers
loaded at the first steps), and ``step``, beyond what it held when the step began (activations,
gradients and transient buffers: what grows with the tokens). On a GPU they come from
``torch.cuda.max_memory_allocated``; on the CPU from the process's resident-set high-water mark
(``VmHWM``, reset before the step), with glibc's ``MALLOC_MMAP_THRESHOLD_`` fixed at 64 KiB so that
freed tensors leave the resident set.

    python bench/bench_train_step.py --model smollm2-135m --rows 32 --prompt-len 40 --response-len 16
    python bench/bench_train_step.py --device cuda --model smollm2-135m [--attention flex] [--out FILE]
    python bench/bench_train_step.py --engine megatron --model smollm2-135m [--gradient-checkpointing]
    python bench/bench_train_step.py --sequence-parallel 2 --rows 2 --n 2 --prompt-len 64 --response-len 2000 \
        --attention varlen
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import tempfile
import time

import torch
import torch.distributed as dist
import torch.multiprocessing as mp
from transformers import AutoModelForCausalLM

from rlloom import Batch, EngineSpec
from rlloom.choices import resolve_device
from rlloom_enginekit.choices import LAYOUTS
from rlloom_enginekit.devices import resolve_dtype, synchronize
from rlloom_enginekit.sequences import token_log_probs
from rlloom_fsdp.config import ATTENTION_CHOICES, FSDPConfig
from rlloom_fsdp.engine import FSDPTrainEngine

ENGINES = ("fsdp", "megatron")


def model_path(name: str) -> str:
    from rlloom_models.config import SmolLM2Config, TinyModelConfig
    from rlloom_models.smollm2 import smollm2_path
    from rlloom_models.tiny import tiny_model_path

    if name == "smollm2-135m":
        return smollm2_path(SmolLM2Config().cache_dir)
    return tiny_model_path(TinyModelConfig(hidden_size=256, num_layers=4, intermediate_size=768))


def make_batch(rows: int, n: int, prompt_len: int, response_len: int, vocab: int, ragged: bool = False) -> Batch:
    generator = torch.Generator().manual_seed(0)
    prompts = torch.randint(0, vocab, (rows // n, prompt_len), generator=generator).repeat_interleave(n, dim=0)
    lengths = (torch.randint(1, response_len + 1, (rows, 1), generator=generator) if ragged
               else torch.full((rows, 1), response_len))
    return Batch({
        "prompts": prompts,
        "prompt_mask": torch.ones(rows, prompt_len, dtype=torch.long),
        "responses": torch.randint(0, vocab, (rows, response_len), generator=generator),
        "response_mask": (torch.arange(response_len) < lengths).long(),
        "advantages": torch.randn(rows, response_len, generator=generator),
    })


def pg_loss(micro, outputs, stats):
    """−Σ A·log π / tokens of the mini-batch."""
    mask = micro["response_mask"].float()
    return -(micro["advantages"] * outputs["log_probs"] * mask).sum() / stats.num_tokens, {}


def build_engine(name: str, path: str, micro_batch_size: int, layout: str, repeats: int, device: torch.device,
                 recompute: bool, attention: str = "sdpa"):
    spec = EngineSpec(path, "actor", 0, repeats + 1, str(device))
    settings = dict(micro_batch_size=micro_batch_size, train_entropy=False, gradient_checkpointing=recompute)
    if name == "megatron":
        from rlloom_megatron.config import MegatronConfig
        from rlloom_megatron.engine import MegatronTrainEngine

        return MegatronTrainEngine(MegatronConfig(**settings), spec)
    return FSDPTrainEngine(FSDPConfig(**settings, sequence_layout=layout, attention=attention), spec)


def time_engine(name: str, path: str, batch: Batch, micro_batch_size: int, layout: str, repeats: int,
                device: torch.device, recompute: bool, attention: str) -> list[float]:
    """Seconds of each of ``repeats + 1`` train steps; the first is the warm-up."""
    engine = build_engine(name, path, micro_batch_size, layout, repeats, device, recompute, attention)
    times = []
    for _ in range(repeats + 1):
        start = time.perf_counter()
        engine.train_step(batch, pg_loss)  # returns floats: the device work is done
        times.append(time.perf_counter() - start)
    engine.close()
    return times


def time_plain(path: str, batch: Batch, repeats: int, device: torch.device) -> list[float]:
    model = AutoModelForCausalLM.from_pretrained(path, dtype=torch.float32).to(device)
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-5)
    batch = batch.to(device)
    input_ids = torch.cat([batch["prompts"], batch["responses"]], dim=1)
    response_len = batch["responses"].shape[1]
    dtype = resolve_dtype("auto", device, "--device")
    times = []
    for _ in range(repeats + 1):
        start = time.perf_counter()
        with torch.autocast(device.type, dtype=dtype, enabled=dtype != torch.float32):
            logits = model(input_ids, logits_to_keep=response_len + 1).logits[:, :-1]
        log_probs = token_log_probs(logits, batch["responses"])
        mask = batch["response_mask"]
        loss = -(batch["advantages"] * log_probs * mask).sum() / mask.sum()
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        optimizer.step()
        optimizer.zero_grad()
        synchronize(device)
        times.append(time.perf_counter() - start)
    return times[1:]


def resident_kib(field: str) -> int:
    """``VmRSS`` or ``VmHWM`` of this process (Linux), in KiB."""
    with open("/proc/self/status", encoding="ascii") as handle:
        return next(int(line.split()[1]) for line in handle if line.startswith(f"{field}:"))


def held_bytes(device: torch.device) -> int:
    """Memory this process holds now: CUDA tensors on a GPU, else its resident set."""
    return torch.cuda.memory_allocated(device) if device.type == "cuda" else resident_kib("VmRSS") * 1024


def step_peaks(engine, batch: Batch, device: torch.device, before_engine: int) -> dict:
    """One train step of ``engine`` on ``batch``: its ``seconds`` and peak bytes beyond ``before_engine``
    (``total_bytes``) and beyond what was held when it began (``step_bytes``) (module docstring)."""
    if device.type == "cuda":
        torch.cuda.reset_peak_memory_stats(device)
    else:
        with open("/proc/self/clear_refs", "w", encoding="ascii") as handle:
            handle.write("5")  # resets VmHWM to the current resident set
    before_step = held_bytes(device)
    start = time.perf_counter()
    engine.train_step(batch, pg_loss)
    seconds = time.perf_counter() - start
    peak = torch.cuda.max_memory_allocated(device) if device.type == "cuda" else resident_kib("VmHWM") * 1024
    return {"seconds": seconds, "total_bytes": peak - before_engine, "step_bytes": peak - before_step}


def _sequence_parallel_rank(rank: int, world: int, store: str, path: str, batch: Batch, device_name: str,
                            threads: int, attention: str, out_dir: str) -> None:
    """One rank of the ``--sequence-parallel`` measurement: a warm-up step, then the measured one."""
    torch.set_num_threads(threads)
    os.environ["LOCAL_RANK"] = str(rank)
    backend = "cpu:gloo,cuda:nccl" if device_name == "cuda" else "gloo"
    dist.init_process_group(backend, init_method=f"file://{store}", rank=rank, world_size=world)
    device = torch.device(device_name, rank) if device_name == "cuda" else torch.device(device_name)
    before = held_bytes(device)
    engine = FSDPTrainEngine(FSDPConfig(micro_batch_size=len(batch), train_entropy=False, attention=attention,
                                        sequence_parallel_size=world), EngineSpec(path, "actor", 0, 3, device_name))
    local = batch.chunk(world)[rank]
    engine.train_step(local, pg_loss)
    result = step_peaks(engine, local, device, before)
    engine.close()
    dist.destroy_process_group()
    with open(os.path.join(out_dir, f"{world}-{rank}.json"), "w") as handle:
        json.dump(result, handle)


def sequence_parallel_memory(path: str, batch: Batch, size: int, device: torch.device, threads: int,
                             attention: str) -> dict:
    """``{"sp1": [rank results], "sp<size>": [...]}``: one step at SP = 1 (one process) and at SP = ``size``
    (``size`` processes), measured by :func:`_sequence_parallel_rank` in fresh processes."""
    os.environ["MALLOC_MMAP_THRESHOLD_"] = str(64 * 1024)  # read by the spawned processes' glibc
    results = {}
    with tempfile.TemporaryDirectory() as out_dir:
        for world in (1, size):
            store = os.path.join(out_dir, f"store{world}")
            mp.start_processes(_sequence_parallel_rank, nprocs=world, start_method="spawn",
                               args=(world, store, path, batch, device.type, threads, attention, out_dir))
            results[f"sp{world}"] = [json.load(open(os.path.join(out_dir, f"{world}-{rank}.json")))
                                     for rank in range(world)]
    return results


def report_sequence_parallel(results: dict, size: int, tokens: int) -> dict:
    """Print each SP size's per-rank peaks and step time, and the ratios of the largest peaks and of the
    slowest ranks' step times."""
    for name, ranks in results.items():
        peaks = "; ".join(f"{rank['total_bytes'] / 2**20:.0f} total, {rank['step_bytes'] / 2**20:.0f} step"
                          for rank in ranks)
        print(f"{name}: peak MiB per rank: {peaks}; step {max(r['seconds'] for r in ranks):.2f} s ({tokens} tokens)")
    ratios = {kind: max(rank[f"{kind}_bytes"] for rank in results[f"sp{size}"]) / results["sp1"][0][f"{kind}_bytes"]
              for kind in ("total", "step")}
    seconds = max(rank["seconds"] for rank in results[f"sp{size}"]) / results["sp1"][0]["seconds"]
    print(f"peak memory per rank, SP={size} / SP=1: total {ratios['total']:.2f}, step {ratios['step']:.2f}; "
          f"step time {seconds:.2f}")
    return {"memory_ratio": ratios, "time_ratio": seconds, **results}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", choices=["tiny", "smollm2-135m"], default="tiny")
    parser.add_argument("--engine", choices=ENGINES, default="fsdp")
    parser.add_argument("--rows", type=int, default=32)
    parser.add_argument("--n", type=int, default=8, help="responses per prompt")
    parser.add_argument("--layout", choices=LAYOUTS, default="shared_prompt", help="the engine's sequence_layout")
    parser.add_argument("--attention", choices=ATTENTION_CHOICES, default="sdpa",
                        help="the engine's attention in the packed layouts (train_engine.attention)")
    parser.add_argument("--ragged", action="store_true", help="response lengths uniform in 1 … --response-len")
    parser.add_argument("--prompt-len", type=int, default=40)
    parser.add_argument("--response-len", type=int, default=16)
    parser.add_argument("--micro-batch-size", type=int, default=16)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--device", default="cpu", help="cpu, cuda or auto")
    parser.add_argument("--gradient-checkpointing", action="store_true", help="the engine recomputes activations")
    parser.add_argument("--sequence-parallel", type=int, default=1,
                        help="N > 1: peak memory per rank at train_engine.sequence_parallel_size=N against 1")
    parser.add_argument("--out", help="write the median step times to this JSON file")
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    device = resolve_device(args.device, "--device")
    path = model_path(args.model)
    vocab = AutoModelForCausalLM.from_pretrained(path).config.vocab_size
    batch = make_batch(args.rows, args.n, args.prompt_len, args.response_len, vocab, args.ragged)
    tokens = int(batch["prompt_mask"].sum() + batch["response_mask"].sum())
    if args.sequence_parallel > 1:
        print(f"model={args.model} device={device} rows={args.rows} n={args.n} tokens={tokens} threads={args.threads} "
              f"attention={args.attention}")
        results = sequence_parallel_memory(path, batch, args.sequence_parallel, device, args.threads, args.attention)
        summary = report_sequence_parallel(results, args.sequence_parallel, tokens)
        if args.out:
            with open(args.out, "w") as handle:
                json.dump(summary, handle)
        return
    plain = statistics.median(time_plain(path, batch, args.repeats, device))
    warm_up, *steps = time_engine(args.engine, path, batch, args.micro_batch_size, args.layout, args.repeats,
                                  device, args.gradient_checkpointing, args.attention)
    engine = statistics.median(steps)
    fsdp = args.engine == "fsdp"
    settings = dict(model=args.model, device=str(device), rows=args.rows, n=args.n, tokens=tokens,
                    threads=args.threads, engine=args.engine, layout=args.layout if fsdp else "padded",
                    attention=args.attention if fsdp else "sdpa", gradient_checkpointing=args.gradient_checkpointing)
    print(" ".join(f"{key}={value}" for key, value in settings.items()))
    print(f"plain transformers + AdamW : {plain:.2f} s/step  ({tokens / plain:.0f} tokens/s)")
    print(f"rlloom {args.engine} train engine: {engine:.2f} s/step  ({tokens / engine:.0f} tokens/s); "
          f"first step (warm-up) {warm_up:.2f} s")
    print(f"ratio engine / plain       : {engine / plain:.2f}")
    if args.out:
        with open(args.out, "w") as handle:
            json.dump(settings | dict(plain_s=plain, engine_s=engine, engine_first_step_s=warm_up,
                                      ratio=engine / plain), handle)


if __name__ == "__main__":
    main()
