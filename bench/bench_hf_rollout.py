"""Time ``HFRolloutEngine.generate`` on a random Qwen2 (default ~5M parameters) against
``model.generate`` on the same rows, in the same run.

Workload: B prompts of 40-64 tokens (left-padded), n completions each, ``max_new_tokens`` new
tokens with no early stop (the stop id is outside the sampled range). The reference is
transformers' ``model.generate`` on the same rows (prompts repeated n times, ``output_logits=True``
since the engine reports log-probs), with its default dynamic cache. ``--decode`` picks the
engine's loop (default ``auto``: CUDA graphs on CUDA, the eager loop on CPU); ``--device cuda``
runs both in bf16 (``--dtype``).

    python bench/bench_hf_rollout.py --prompts 4 --n 8 --max-new-tokens 16
    python bench/bench_hf_rollout.py --device cuda --prompts 8 --n 8 --max-new-tokens 256 \
        --vocab 49152 --hidden 896 --intermediate 4864 --layers 24 --heads 14 --kv-heads 2   # 0.5B shape
"""

from __future__ import annotations

import argparse
import json
import statistics
import tempfile
import time

import torch
from rlloom import Batch, EngineSpec, SamplingParams
from rlloom.choices import resolve_device
from rlloom_enginekit.devices import resolve_dtype, synchronize
from tokenizers import Tokenizer, models
from transformers import PreTrainedTokenizerFast, Qwen2Config, Qwen2ForCausalLM

from rlloom_hf import HFRolloutConfig, HFRolloutEngine


def build_model_dir(path: str, vocab: int, hidden: int, intermediate: int, layers: int, heads: int,
                    kv_heads: int) -> Qwen2ForCausalLM:
    config = Qwen2Config(vocab_size=vocab, hidden_size=hidden, intermediate_size=intermediate,
                         num_hidden_layers=layers, num_attention_heads=heads, num_key_value_heads=kv_heads,
                         tie_word_embeddings=True, eos_token_id=vocab - 1, pad_token_id=0)
    model = Qwen2ForCausalLM(config)
    # The stop token can never be sampled: every response runs to max_new_tokens.
    with torch.no_grad():
        model.lm_head.weight[vocab - 1] = 0.0  # tied: this also zeroes its embedding, harmless here
    model.save_pretrained(path)
    words = {f"t{i}": i for i in range(vocab)}
    tokenizer = Tokenizer(models.WordLevel(words, unk_token="t1"))
    PreTrainedTokenizerFast(tokenizer_object=tokenizer, pad_token="t0", eos_token=f"t{vocab - 1}").save_pretrained(path)
    return model


def add_workload_args(parser: argparse.ArgumentParser, prompts: int, max_new_tokens: int) -> None:
    """The workload and random-model shape options shared by the rollout benchmarks."""
    parser.add_argument("--prompts", type=int, default=prompts)
    parser.add_argument("--n", type=int, default=8)
    parser.add_argument("--max-new-tokens", type=int, default=max_new_tokens)
    # defaults: ~5M parameters; SmolLM2-135M's shape is
    # --vocab 49152 --hidden 576 --intermediate 1536 --layers 30 --heads 9 --kv-heads 3
    parser.add_argument("--vocab", type=int, default=8192)
    parser.add_argument("--hidden", type=int, default=256)
    parser.add_argument("--intermediate", type=int, default=704)
    parser.add_argument("--layers", type=int, default=4)
    parser.add_argument("--heads", type=int, default=4)
    parser.add_argument("--kv-heads", type=int, default=2)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--repeats", type=int, default=5)


def random_prompts(count: int, vocab: int) -> Batch:
    """``count`` left-padded prompts of 40-64 random token ids in [1, vocab - 1)."""
    lengths = torch.randint(40, 65, (count,))
    ids = torch.randint(1, vocab - 1, (count, int(lengths.max())))
    mask = (torch.arange(ids.shape[1]) >= ids.shape[1] - lengths[:, None]).long()
    return Batch({"prompts": ids * mask, "prompt_mask": mask})


def main() -> None:
    parser = argparse.ArgumentParser()
    add_workload_args(parser, prompts=4, max_new_tokens=16)
    parser.add_argument("--device", default="cpu", help="cpu, cuda or auto")
    parser.add_argument("--dtype", default="auto", help="auto: bfloat16 on CUDA, float32 on CPU")
    parser.add_argument("--decode", default="auto", help="the engine's rollout.decode: auto, eager, static, graphs")
    parser.add_argument("--out", help="write the timings to this JSON file")
    args = parser.parse_args()
    device = resolve_device(args.device, "--device")
    torch.set_num_threads(args.threads)
    torch.manual_seed(0)

    with tempfile.TemporaryDirectory() as path:
        model = build_model_dir(path, args.vocab, args.hidden, args.intermediate, args.layers, args.heads,
                                args.kv_heads)
        print(f"parameters: {sum(p.numel() for p in model.parameters()) / 1e6:.2f}M")
        engine = HFRolloutEngine(HFRolloutConfig(dtype=args.dtype, decode=args.decode),
                                 EngineSpec(model_path=path, role="rollout", device=str(device)))
        print(f"device={device} dtype={resolve_dtype(args.dtype, device, '--dtype')} decode={args.decode}")
        prompts = random_prompts(args.prompts, args.vocab)
        sampling = SamplingParams(n=args.n, temperature=1.0, max_new_tokens=args.max_new_tokens, seed=0)

        def time_it(fn) -> str:
            """Median wall and CPU time over the repeats (CPU time is steadier on a shared machine)."""
            fn()  # warm-up (the first call also captures the CUDA graphs)
            wall, cpu = [], []
            for _ in range(args.repeats):
                synchronize(device)
                start_wall, start_cpu = time.perf_counter(), time.process_time()
                fn()
                synchronize(device)
                wall.append(time.perf_counter() - start_wall)
                cpu.append(time.process_time() - start_cpu)
            return statistics.median(wall), statistics.median(cpu)

        rows = args.prompts * args.n
        tokens = rows * args.max_new_tokens
        engine_wall, engine_cpu = time_it(lambda: engine.generate(prompts, sampling))
        print(f"HFRolloutEngine.generate: {rows} rows x {args.max_new_tokens} tokens: {engine_wall * 1e3:.0f} ms wall, "
              f"{engine_cpu * 1e3:.0f} ms CPU, {tokens / engine_wall:.0f} tokens/s")

        repeated = prompts.repeat(args.n).to(device)
        reference = engine.model
        hf_wall, hf_cpu = time_it(lambda: reference.generate(
            input_ids=repeated["prompts"], attention_mask=repeated["prompt_mask"], do_sample=True,
            temperature=1.0, top_k=0, max_new_tokens=args.max_new_tokens, min_new_tokens=args.max_new_tokens,
            output_logits=True, return_dict_in_generate=True, pad_token_id=0))
        print(f"model.generate (reference):        {rows} rows x {args.max_new_tokens} tokens: {hf_wall * 1e3:.0f} ms wall, "
              f"{hf_cpu * 1e3:.0f} ms CPU, {tokens / hf_wall:.0f} tokens/s")
        print(f"speed-up engine / model.generate: {hf_wall / engine_wall:.2f}x")
        if args.out:
            with open(args.out, "w") as handle:
                json.dump(dict(rows=rows, new_tokens=args.max_new_tokens, device=str(device), decode=args.decode,
                               engine_s=engine_wall, generate_s=hf_wall, engine_tokens_per_s=tokens / engine_wall,
                               speedup=hf_wall / engine_wall), handle)


if __name__ == "__main__":
    main()
