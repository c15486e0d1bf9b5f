"""vLLM rollout vs. hf rollout vs. raw ``LLM.generate``, and weight-sync time vs. an in-memory copy.

On the same random Qwen2 as ``bench_hf_rollout.py`` (default ~5M parameters, float32, CPU) and the
same prompts (B prompts of 40-64 tokens, n samples each, ``max_new_tokens`` with no early stop):

- tokens/s of ``VLLMRolloutEngine.generate``, of the raw ``LLM.generate`` call it makes (same
  requests and sampling parameters, built outside the timed region) and of ``HFRolloutEngine.generate``;
  our overhead over the raw engine = vLLM-engine time / raw time - 1 (target <= 10%);
- seconds of ``update_weights`` (in-process reload), of a ``resharder=safetensors`` sync, and of
  copying the same bytes into preallocated tensors.

    python bench/bench_vllm_rollout.py --prompts 8 --n 8 --max-new-tokens 32
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time

import torch

from bench_hf_rollout import add_workload_args, build_model_dir, random_prompts


class StateDictTrainer:
    """The train side of a sync: ``named_weights()`` over a model's parameters (tied head once)."""

    def __init__(self, model: torch.nn.Module) -> None:
        self.model = model

    def named_weights(self):
        yield from ((name, p.detach()) for name, p in self.model.named_parameters())


def median_seconds(fn, repeats: int) -> float:
    fn()  # warm-up
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def main() -> None:
    parser = argparse.ArgumentParser()
    add_workload_args(parser, prompts=8, max_new_tokens=32)
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    torch.manual_seed(0)

    from rlloom import EngineSpec, SamplingParams
    from rlloom_hf import HFRolloutConfig, HFRolloutEngine
    from rlloom_resharders import SafetensorsResharder, SafetensorsResharderConfig

    from rlloom_vllm import VLLMRolloutConfig, VLLMRolloutEngine
    from rlloom_enginekit.prompts import prompt_token_lists
    from rlloom_vllm.outputs import request_seeds

    with tempfile.TemporaryDirectory() as path:
        model = build_model_dir(path, args.vocab, args.hidden, args.intermediate, args.layers, args.heads,
                                args.kv_heads)
        num_bytes = sum(p.numel() * p.element_size() for p in model.parameters())
        print(f"parameters: {sum(p.numel() for p in model.parameters()) / 1e6:.2f}M ({num_bytes / 1e6:.1f} MB)")
        prompts = random_prompts(args.prompts, args.vocab)
        sampling = SamplingParams(n=args.n, temperature=1.0, max_new_tokens=args.max_new_tokens, seed=0)
        tokens = args.prompts * args.n * args.max_new_tokens

        vllm_engine = VLLMRolloutEngine(VLLMRolloutConfig(max_model_len=256, omp_threads_bind="nobind"),
                                        EngineSpec(model_path=path, role="rollout"))
        torch.set_num_threads(args.threads)
        requests = [{"prompt_token_ids": row} for row in prompt_token_lists(prompts["prompts"], prompts["prompt_mask"])]
        params = [vllm_engine.vllm_sampling(sampling, args.n, s) for s in request_seeds(0, len(requests))]
        ours = median_seconds(lambda: vllm_engine.generate(prompts, sampling), args.repeats)
        raw = median_seconds(lambda: vllm_engine.llm.generate(requests, params, use_tqdm=False), args.repeats)

        trainer = StateDictTrainer(model)
        reload_s = median_seconds(lambda: vllm_engine.update_weights(trainer.named_weights()), args.repeats)
        resharder = SafetensorsResharder(SafetensorsResharderConfig())
        files_s = median_seconds(lambda: resharder.sync(trainer, vllm_engine), args.repeats)
        buffers = {name: torch.empty_like(t) for name, t in trainer.named_weights()}

        def copy_all() -> None:
            for name, tensor in trainer.named_weights():
                buffers[name].copy_(tensor)

        copy_s = median_seconds(copy_all, args.repeats)
        vllm_engine.close()

        hf_engine = HFRolloutEngine(HFRolloutConfig(), EngineSpec(model_path=path, role="rollout"))
        hf = median_seconds(lambda: hf_engine.generate(prompts, sampling), args.repeats)

    rows = args.prompts * args.n
    print(f"workload: {rows} rows x {args.max_new_tokens} new tokens = {tokens} tokens, {args.threads} threads")
    print(f"vllm rollout engine : {tokens / ours:8.0f} tok/s ({ours * 1e3:.0f} ms)")
    print(f"raw LLM.generate    : {tokens / raw:8.0f} tok/s ({raw * 1e3:.0f} ms)")
    print(f"hf rollout engine   : {tokens / hf:8.0f} tok/s ({hf * 1e3:.0f} ms)")
    print(f"overhead over raw vLLM: {100 * (ours / raw - 1):+.1f}%   vllm / hf speed-up: {hf / ours:.1f}x")
    print(f"weight sync, in-process reload : {reload_s * 1e3:.1f} ms")
    print(f"weight sync, safetensors files : {files_s * 1e3:.1f} ms")
    print(f"in-memory copy of the same bytes: {copy_s * 1e3:.1f} ms "
          f"(reload / copy {reload_s / copy_s:.1f}x, files / copy {files_s / copy_s:.1f}x)")


if __name__ == "__main__":
    main()
