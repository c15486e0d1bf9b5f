"""Per-request generation (``AsyncRolloutEngine.generate_one``) on the hf engine: K single-prompt
requests in flight at once, against the same K prompts as K sequential single-prompt calls and as
one batch call, in the same run (the same random Qwen2, default ~5M parameters).

The concurrent requests are gathered into batch calls by the engine's ``BatchingScheduler``, so
they should cost about what the one batch call costs; sequential calls pay a decoding loop each.
Also checks that the concurrent requests return the batch call's tokens.

    python bench/bench_async_rollout.py            # 64 prompts, n=1, 32 new tokens
"""

from __future__ import annotations

import argparse
import asyncio
import dataclasses
import json
import tempfile
import time

import torch
from rlloom import EngineSpec, SamplingParams
from rlloom_enginekit.prompts import prompt_token_lists

from bench_hf_rollout import add_workload_args, build_model_dir, random_prompts
from rlloom_hf import HFRolloutConfig, HFRolloutEngine


def main() -> None:
    parser = argparse.ArgumentParser()
    add_workload_args(parser, prompts=64, max_new_tokens=32)
    parser.set_defaults(n=1)
    args = parser.parse_args()
    torch.manual_seed(0)
    with tempfile.TemporaryDirectory() as path:
        build_model_dir(path, args.vocab, args.hidden, args.intermediate, args.layers, args.heads, args.kv_heads)
        engine = HFRolloutEngine(HFRolloutConfig(max_batch_rows=args.prompts * args.n),
                                 EngineSpec(model_path=path, role="rollout", seed=0))
        prompts = random_prompts(args.prompts, args.vocab)
        token_lists = prompt_token_lists(prompts["prompts"], prompts["prompt_mask"])
        sampling = SamplingParams(n=args.n, temperature=1.0, max_new_tokens=args.max_new_tokens, seed=1)
        one = [dataclasses.replace(sampling, first_prompt=i) for i in range(len(token_lists))]
        engine.generate(prompts.slice(0, 2), sampling)  # warm-up

        start = time.perf_counter()
        batch = engine.generate(prompts, sampling)
        batch_s = time.perf_counter() - start

        start = time.perf_counter()
        for i in range(len(token_lists)):
            engine.generate(prompts.slice(i, i + 1), one[i])
        sequential_s = time.perf_counter() - start

        async def concurrent():
            return await asyncio.gather(*(engine.generate_one(ids, s) for ids, s in zip(token_lists, one)))

        start = time.perf_counter()
        answers = asyncio.run(concurrent())
        concurrent_s = time.perf_counter() - start

        lengths = batch["response_mask"].sum(1).tolist()
        same = all(answer.token_ids[j] == batch["responses"][i * args.n + j, : lengths[i * args.n + j]].tolist()
                   for i, answer in enumerate(answers) for j in range(args.n))
        print(json.dumps({
            "prompts": args.prompts, "n": args.n, "max_new_tokens": args.max_new_tokens,
            "one_batch_call_s": round(batch_s, 3), "sequential_calls_s": round(sequential_s, 3),
            "concurrent_requests_s": round(concurrent_s, 3),
            "speedup_concurrent_vs_sequential": round(sequential_s / concurrent_s, 2),
            "engine_generate_calls_for_the_requests": engine._scheduler.generate_calls,
            "concurrent_tokens_equal_batch_call": same,
        }, indent=1))


if __name__ == "__main__":
    main()
