"""The CPU time the ``hf`` rollout engine (eager loop) spends on one step's generation of ``bench_async.py``'s
varlen workload (8 ``data=digits`` prompts x 8 samples, responses of 1 to 256 tokens, the tiny random Phi with
the byte tokenizer), on one torch thread as each side of an async run has, measured by the thread's own CPU
clock (``time.thread_time``): a number that the other processes on a shared machine barely move, unlike the
wall-clock samples/s of ``bench_async.py``. Job 0 warms up; jobs 1..J are timed, job j seeded with j, so two
commits generate the same tokens and compare by CPU seconds alone.

    python bench/bench_rollout_cpu.py               # 6 timed jobs
"""

from __future__ import annotations

import argparse
import time

from bench_async import N, PROMPTS
from bench_vs_trl import VARLEN_TOKENS, varlen_folder


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--jobs", type=int, default=6, help="timed jobs (after one warm-up job)")
    parser.add_argument("--threads", type=int, default=1, help="torch threads")
    args = parser.parse_args()
    import torch
    from rlloom import Batch, EngineSpec, SamplingParams
    from rlloom_enginekit.prompts import left_pad
    from rlloom_hf import HFRolloutConfig, HFRolloutEngine
    from rlloom_models.tiny import build_tokenizer
    from rlloom_tasks.data.digits import PROMPTS as TEXTS

    torch.set_num_threads(args.threads)
    engine = HFRolloutEngine(HFRolloutConfig(device="cpu", decode="eager"),
                             EngineSpec(model_path=varlen_folder(build_tokenizer(1024)), role="rollout"))
    seconds, tokens, steps = 0.0, 0, 0
    for job in range(args.jobs + 1):
        texts = [TEXTS[(job * PROMPTS + row) % len(TEXTS)] for row in range(PROMPTS)]
        ids, mask = left_pad([engine.tokenizer.encode(text) for text in texts])
        start, first_step = time.thread_time(), engine.decode_steps
        out = engine.generate(Batch({"prompts": ids, "prompt_mask": mask}),
                              SamplingParams(n=N, temperature=1.0, max_new_tokens=VARLEN_TOKENS, seed=job))
        if job:
            seconds += time.thread_time() - start
            tokens += int(out["response_mask"].sum())
            steps += engine.decode_steps - first_step
    print(f"{args.jobs} jobs of {PROMPTS} x {N}: {seconds / args.jobs:.3f} CPU s per job, {tokens / args.jobs:.0f} "
          f"tokens and {steps / args.jobs:.0f} decode steps per job, {1e3 * seconds / tokens:.3f} CPU ms per token")


if __name__ == "__main__":
    main()
