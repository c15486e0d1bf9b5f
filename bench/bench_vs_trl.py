"""rlloom against TRL's GRPOTrainer on identical work, one after the other, in one invocation.

Each side runs in its own fresh subprocess (separate memory peaks, same thread count), and the
ratios rlloom / TRL are printed at the end:

- ``quickstart``: SmolLM2-135M-Instruct (rlloom's converted folder, loaded by both), single-digit
  addition in the chat template (rlloom-tasks' ``data=arithmetic`` splits: 36 train, 64
  validation prompts; the same records feed TRL), 4 prompts x 8 samples per step, <= 16 new
  tokens, lr 1e-5 constant, no KL, T = 1, the ``reward=arithmetic`` verifier on both sides.
  Every ``--val-every`` steps both sample 4 responses per validation prompt at T = 1 (rlloom
  with its own validation, TRL in a callback with ``model.generate``). Reported: median step
  time (validation excluded), samples/s, peak memory, the validation curve and the training
  time (validation excluded) to reach 0.9 sampled accuracy.
- ``shape``: throughput on a Qwen2.5-0.5B-shaped random model (hidden 896, 24 layers, 14 heads,
  2 KV heads, intermediate 4864) with SmolLM2's 49,152-token tokenizer, 8 prompts x 8 samples,
  ~128 prompt tokens, 256 forced new tokens (EOS ignored), the ``digit_fraction`` reward;
  ``--size small`` shrinks it (4 layers, hidden 256, 32 new tokens) for a 2-core CPU.
- ``varlen``: responses of very different lengths, where padding dominates a padded trainer's
  work: a tiny random Phi (hidden 256, 4 layers; its LM head has a bias) whose next token is
  nearly uniform except that EOS has probability 1/64 at every step, so response lengths are
  geometric, from 1 to the 256-token cap (mean ~63; about 2 % reach the cap); the
  quickstart's arithmetic prompts, 8 prompts x 8 samples, the ``digit_fraction`` reward.

TRL runs in float32 on the quickstart (its faster setting on the H100: 0.82 s/step against
1.01 s/step in bf16, ../shared/gpu/README.md) and in bf16 on the 0.5B shape on CUDA, as
measured there; rlloom runs with its defaults for the device (bf16 compute on CUDA), plus any
``--rlloom OVERRIDE`` (e.g. ``--rlloom resharder=shared``: one copy of the weights, as TRL keeps).

    pip install -r bench/requirements.txt
    python bench/bench_vs_trl.py --device cuda
    python bench/bench_vs_trl.py --device cpu --workload quickstart --steps 15 --out trl.json
    python bench/bench_vs_trl.py --device cpu --workload quickstart --steps 25 --trl-steps 40   # TRL longer
    python bench/bench_vs_trl.py --device cuda --workload shape --sides rlloom     # rlloom alone
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time

REQUIREMENTS = "pip install -r bench/requirements.txt"
QUICKSTART_LENGTH = 16
SHAPES = {  # name -> (Qwen2 config fields, new tokens)
    "full": (dict(hidden_size=896, intermediate_size=4864, num_hidden_layers=24, num_attention_heads=14,
                  num_key_value_heads=2), 256),
    "small": (dict(hidden_size=256, intermediate_size=704, num_hidden_layers=4, num_attention_heads=4,
                   num_key_value_heads=2), 32),
}
VARLEN = dict(hidden_size=256, intermediate_size=1024, num_hidden_layers=4, num_attention_heads=4)
VARLEN_TOKENS, VARLEN_MEAN = 256, 64  # response cap, and 1 / P(EOS) at every step
# ~128 prompt tokens with SmolLM2's chat template (its system prompt adds ~30).
FILLER = "Consider the following careful question about numbers and answer it step by step. " * 8
SHAPE_TEMPLATE = FILLER + "What is {a}+{b}?"


# ---------------------------------------------------------------------------------- workloads
def smollm2_folder() -> str:
    from rlloom_models.smollm2 import smollm2_path

    return smollm2_path()


def shape_folder(size: str) -> str:
    """A random-init Qwen2 of the ``size`` shape with SmolLM2's tokenizer, in a temporary folder."""
    import torch
    from transformers import AutoTokenizer, GenerationConfig, Qwen2Config, Qwen2ForCausalLM

    tokenizer = AutoTokenizer.from_pretrained(smollm2_folder())
    fields, _ = SHAPES[size]
    config = Qwen2Config(vocab_size=len(tokenizer), tie_word_embeddings=True, rope_theta=1e6,
                         max_position_embeddings=4096, eos_token_id=tokenizer.eos_token_id,
                         pad_token_id=tokenizer.pad_token_id, **fields)
    torch.manual_seed(0)
    model = Qwen2ForCausalLM(config)
    model.generation_config = GenerationConfig(eos_token_id=tokenizer.eos_token_id,
                                               pad_token_id=tokenizer.pad_token_id)
    folder = tempfile.mkdtemp(prefix=f"rlloom-bench-{size}-")
    model.save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    return folder


def varlen_folder(tokenizer=None) -> str:
    """The ``varlen`` workload's random Phi with ``tokenizer`` (None: SmolLM2's), in a temporary folder: LM
    head weights scaled to ~0 so the logits are its bias, 0 except ``log((V - 1) / (VARLEN_MEAN - 1))``
    at EOS, which makes P(EOS) = 1 / VARLEN_MEAN at every step."""
    import math

    import torch
    from transformers import AutoTokenizer, GenerationConfig, PhiConfig, PhiForCausalLM

    tokenizer = tokenizer or AutoTokenizer.from_pretrained(smollm2_folder())
    vocab = len(tokenizer)
    config = PhiConfig(vocab_size=vocab, max_position_embeddings=1024, eos_token_id=tokenizer.eos_token_id,
                       bos_token_id=tokenizer.bos_token_id, pad_token_id=tokenizer.pad_token_id, **VARLEN)
    torch.manual_seed(0)
    model = PhiForCausalLM(config)
    with torch.no_grad():
        model.lm_head.weight.mul_(1e-3)
        model.lm_head.bias.zero_()
        model.lm_head.bias[tokenizer.eos_token_id] = math.log((vocab - 1) / (VARLEN_MEAN - 1))
    model.generation_config = GenerationConfig(eos_token_id=tokenizer.eos_token_id,
                                               pad_token_id=tokenizer.pad_token_id)
    folder = tempfile.mkdtemp(prefix="rlloom-bench-varlen-")
    model.save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    return folder


def workload(name: str, args: argparse.Namespace) -> dict:
    """Everything both sides need to run ``name``, as plain JSON values."""
    if name == "quickstart":
        return dict(name=name, model=smollm2_folder(), prompts=4, n=8, new_tokens=QUICKSTART_LENGTH,
                    template="What is {a}{op}{b}? Reply with only the number.", reward="arithmetic",
                    ignore_eos=False, steps=args.steps, val_every=args.val_every, trl_bf16=False)
    if name == "varlen":
        return dict(name=name, model=varlen_folder(), prompts=8, n=8, new_tokens=VARLEN_TOKENS,
                    template="What is {a}{op}{b}? Reply with only the number.", reward="digit_fraction",
                    ignore_eos=False, steps=args.varlen_steps, val_every=0, trl_bf16=args.device == "cuda")
    new_tokens = SHAPES[args.size][1]
    return dict(name=name, model=shape_folder(args.size), prompts=8, n=8, new_tokens=new_tokens,
                template=SHAPE_TEMPLATE, reward="digit_fraction", ignore_eos=True, steps=args.shape_steps,
                val_every=0, trl_bf16=args.device == "cuda")


def records(work: dict):
    """(train, val) PromptRecords of rlloom-tasks' arithmetic dataset with the workload's template."""
    from rlloom_tasks.data.arithmetic import ArithmeticDataConfig, build_arithmetic

    splits = build_arithmetic(ArithmeticDataConfig(template=work["template"]), seed=0)
    return splits.train, splits.val


def reward_scorer(work: dict):
    """``score(response_text, ground_truth) -> float``: the rlloom reward the workload names."""
    from rlloom_tasks.rewards import arithmetic, digits

    if work["reward"] == "arithmetic":
        cfg = arithmetic.ArithmeticRewardConfig()
        return lambda text, truth: arithmetic.verify(cfg, text, truth).score
    return lambda text, _truth: digits.verify(text).score


# ---------------------------------------------------------------------------------- rlloom side
def run_rlloom(work: dict, device: str, threads: int) -> dict:
    """``rlloom train`` on the workload; its step times, memory and validation curve."""
    from rlloom_trainer.testing import metric_rows

    run_dir = tempfile.mkdtemp(prefix="rlloom-bench-run-")
    overrides = [
        f"trainer.device={device}", f"trainer.run_dir={run_dir}", "trainer.trackers=[jsonl]",
        f"trainer.total_steps={work['steps']}", f"trainer.train_batch_size={work['prompts']}",
        f"algorithm.n={work['n']}", f"sampling.max_new_tokens={work['new_tokens']}",
        f"sampling.ignore_eos={str(work['ignore_eos']).lower()}", f"reward={work['reward']}",
        f"data.template='{work['template']}'", "trainer.val_greedy=false", f"launcher.num_threads={threads}",
        "trainer.save_final_model=false",
    ]
    if work["val_every"]:
        overrides += [f"trainer.test_freq={work['val_every']}", "trainer.val_n=4"]
    else:
        overrides += ["trainer.val_before_train=false", "trainer.test_freq=0", "trainer.val_max_prompts=1",
                      "trainer.val_n=1"]
    if work["name"] != "quickstart":
        overrides += ["model=hf", f"model.path={work['model']}"]
    overrides += work.get("rlloom_overrides", [])
    # `rlloom train` through this interpreter: the console script may live elsewhere (pip --target).
    cli = "import sys; from rlloom.cli import main; sys.exit(main(sys.argv[1:]))"
    subprocess.run([sys.executable, "-c", cli, "train", *overrides], check=True,
                   stdout=subprocess.DEVNULL)
    rows = metric_rows(run_dir)
    steps = [row for row in rows if row["step"] > 0]
    memory_key = "perf/max_memory_allocated_gb" if device == "cuda" else "perf/cpu_memory_peak_gb"
    accuracy = [(row["step"], row["val-core/arithmetic/acc/mean@4"]) for row in rows
                if "val-core/arithmetic/acc/mean@4" in row]
    return dict(step_s=[row["timing_s/step"] for row in steps],
                peak_gb=max(row.get(memory_key, 0.0) for row in steps), accuracy=accuracy,
                response_len=[row["response_length/mean"] for row in steps], breakdown=step_breakdown(steps))


def step_breakdown(steps: list[dict]) -> dict[str, float]:
    """The median over steps (the first, with its warm-up, left out) of every ``timing_s/*`` and
    ``perf/*`` metric: where a step's time goes."""
    rows = steps[1:] if len(steps) > 1 else steps
    keys = sorted({key for row in rows for key in row if key.startswith(("timing_s/", "perf/"))})
    return {key: statistics.median(row[key] for row in rows if key in row) for key in keys}


# ---------------------------------------------------------------------------------- TRL side
def run_trl(work: dict, device: str, threads: int) -> dict:
    """TRL's GRPOTrainer on the workload (this runs in its own subprocess)."""
    import resource

    import torch
    from datasets import Dataset
    from transformers import AutoModelForCausalLM, AutoTokenizer, TrainerCallback
    from trl import GRPOConfig, GRPOTrainer

    torch.set_num_threads(threads)
    cuda = device == "cuda"
    train, val = records(work)
    score = reward_scorer(work)
    dataset = Dataset.from_list([{"prompt": r.prompt, "ground_truth": r.ground_truth} for r in train] * 100)

    def reward(completions, ground_truth, **_):
        return [score(completion[0]["content"], truth) for completion, truth in zip(completions, ground_truth)]

    tokenizer = AutoTokenizer.from_pretrained(work["model"], padding_side="left")
    model = AutoModelForCausalLM.from_pretrained(work["model"], dtype=torch.float32)
    generation = {"min_new_tokens": work["new_tokens"]} if work["ignore_eos"] else None
    config = GRPOConfig(
        output_dir=tempfile.mkdtemp(prefix="trl-bench-"), per_device_train_batch_size=work["prompts"] * work["n"],
        num_generations=work["n"], max_completion_length=work["new_tokens"], learning_rate=1e-5,
        lr_scheduler_type="constant", beta=0.0, temperature=1.0, max_steps=work["steps"], logging_steps=1,
        save_strategy="no", report_to="none", seed=0, bf16=work["trl_bf16"], use_cpu=not cuda,
        generation_kwargs=generation, dataloader_num_workers=0, gradient_checkpointing=False,
    )

    def sync() -> None:
        if cuda:
            torch.cuda.synchronize()

    class Timer(TrainerCallback):
        """Training time per step, and sampled validation every ``val_every`` steps (not timed)."""

        def __init__(self) -> None:
            self.step_s: list[float] = []
            self.accuracy: list[tuple[int, float]] = []

        def on_train_begin(self, args, state, control, model=None, **kwargs):
            if work["val_every"]:
                self.accuracy.append((0, validate(model)))

        def on_step_begin(self, args, state, control, **kwargs):
            sync()
            self.started = time.perf_counter()

        def on_step_end(self, args, state, control, model=None, **kwargs):
            sync()
            self.step_s.append(time.perf_counter() - self.started)
            every = work["val_every"]
            if every and (state.global_step % every == 0 or state.global_step == work["steps"]):
                self.accuracy.append((state.global_step, validate(model)))

    @torch.no_grad()
    def validate(model) -> float:
        """Mean score of 4 responses at T = 1 per validation prompt (rlloom's mean@4). In eval mode
        with the KV cache: in train mode TRL's gradient checkpointing turns the cache off, and
        ``generate`` then returns garbage (0.02 accuracy for the untrained model's 0.21)."""
        texts = [tokenizer.apply_chat_template(r.prompt, tokenize=False, add_generation_prompt=True) for r in val]
        inputs = tokenizer(texts, return_tensors="pt", padding=True).to(model.device)
        training = model.training
        model.eval()
        out = model.generate(**inputs, do_sample=True, temperature=1.0, top_k=0, top_p=1.0, use_cache=True,
                             max_new_tokens=work["new_tokens"], num_return_sequences=4,
                             pad_token_id=tokenizer.pad_token_id)
        model.train(training)
        answers = tokenizer.batch_decode(out[:, inputs["input_ids"].shape[1]:], skip_special_tokens=True)
        scores = [score(text, val[i // 4].ground_truth) for i, text in enumerate(answers)]
        return sum(scores) / len(scores)

    timer = Timer()
    trainer = GRPOTrainer(model=model, reward_funcs=reward, args=config, train_dataset=dataset,
                          processing_class=tokenizer, callbacks=[timer])
    trainer.train()
    peak = (torch.cuda.max_memory_allocated() / 1e9 if cuda
            else resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024 / 1e9)
    lengths = [row["completions/mean_length"] for row in trainer.state.log_history if "completions/mean_length" in row]
    return dict(step_s=timer.step_s, peak_gb=peak, accuracy=timer.accuracy, response_len=lengths)


# ---------------------------------------------------------------------------------- report
def summary(result: dict, work: dict) -> dict:
    """Median step time (the first step, with its warm-up, left out), samples/s, time to 0.9."""
    steps = result["step_s"]
    median = statistics.median(steps[1:] if len(steps) > 1 else steps)
    elapsed = {step: sum(steps[:step]) for step, _ in result["accuracy"]}
    reached = [elapsed[step] for step, acc in result["accuracy"] if acc >= 0.9]
    lengths = result.get("response_len") or [float("nan")]
    return dict(median_step_s=median, samples_per_s=work["prompts"] * work["n"] / median,
                peak_gb=result["peak_gb"], time_to_0_9_s=reached[0] if reached else None,
                accuracy=result["accuracy"], mean_response_len=statistics.fmean(lengths),
                **({"breakdown": result["breakdown"]} if "breakdown" in result else {}))


def side(name: str, work: dict, args: argparse.Namespace) -> dict:
    """Run one side in a fresh interpreter; its JSON result."""
    with tempfile.NamedTemporaryFile("w", suffix=".json", delete=False) as handle:
        json.dump(work, handle)
    out = handle.name + ".out"
    subprocess.run([sys.executable, __file__, "--side", name, "--work", handle.name, "--result", out,
                    "--device", args.device, "--threads", str(args.threads)], check=True)
    with open(out) as result:
        return json.load(result)


def report(name: str, work: dict, results: dict[str, dict]) -> None:
    """Print the sides' summaries (TRL's column is empty when ``--sides rlloom``)."""
    rl = summary(results["rlloom"], work)
    trl = summary(results["trl"], work) if "trl" in results else None
    print(f"\n== {name}: {work['prompts']} prompts x {work['n']} samples, {work['new_tokens']} new tokens")
    print(f"{'':24}{'rlloom':>12}{'TRL':>12}{'TRL / rlloom':>14}")
    for key, label in (("median_step_s", "median step (s)"), ("samples_per_s", "samples/s"),
                       ("peak_gb", "peak memory (GB)"), ("time_to_0_9_s", "train s to 0.9 acc")):
        a, b = rl[key], None if trl is None else trl[key]
        ratio = "" if a is None or b is None else f"{(a / b if key == 'samples_per_s' else b / a):14.2f}"
        print(f"{label:24}{'-' if a is None else f'{a:12.3f}':>12}{'-' if b is None else f'{b:12.3f}':>12}{ratio}")
    print(f"{'mean response length':24}{rl['mean_response_len']:12.1f}"
          + ("" if trl is None else f"{trl['mean_response_len']:12.1f}"))
    for label, result in (("rlloom", rl), ("TRL", trl)):
        if result and result["accuracy"]:
            print(f"{label} sampled accuracy by step: " + ", ".join(f"{s}: {a:.2f}" for s, a in result["accuracy"]))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--device", default="cuda", choices=["cpu", "cuda"])
    parser.add_argument("--workload", default="all", choices=["quickstart", "shape", "varlen", "all"])
    parser.add_argument("--steps", type=int, default=15, help="quickstart steps")
    parser.add_argument("--trl-steps", type=int, help="TRL's quickstart steps (default: --steps); more, to find "
                        "when TRL reaches 0.9 accuracy when it does not within --steps")
    parser.add_argument("--val-every", type=int, default=5)
    parser.add_argument("--shape-steps", type=int, default=4, help="0.5B-shape steps")
    parser.add_argument("--varlen-steps", type=int, default=4, help="variable-length workload steps")
    parser.add_argument("--size", default="full", choices=sorted(SHAPES), help="the shape workload's size")
    parser.add_argument("--threads", type=int, default=os.cpu_count() or 1)
    parser.add_argument("--out", help="write every number measured to this JSON file")
    parser.add_argument("--sides", nargs="+", default=["rlloom", "trl"], choices=["rlloom", "trl"],
                        help="which sides to run (rlloom alone: compare with TRL's numbers in docs/performance.md)")
    parser.add_argument("--rlloom", action="append", default=[], metavar="OVERRIDE",
                        help="an extra override for the rlloom side (repeatable), e.g. --rlloom resharder=shared")
    parser.add_argument("--side", help=argparse.SUPPRESS)
    parser.add_argument("--work", help=argparse.SUPPRESS)
    parser.add_argument("--result", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.side:
        with open(args.work) as handle:
            work = json.load(handle)
        result = (run_rlloom if args.side == "rlloom" else run_trl)(work, args.device, args.threads)
        with open(args.result, "w") as handle:
            json.dump(result, handle)
        return
    if "rlloom" not in args.sides:
        parser.error("--sides: rlloom is the side measured; add trl to compare")
    if "trl" in args.sides:
        try:
            import trl  # noqa: F401 - only checked here; it runs in the TRL subprocess
        except ImportError:
            sys.exit(f"bench_vs_trl: TRL is not installed (a benchmark-only dependency): {REQUIREMENTS}; or measure "
                     f"rlloom alone with --sides rlloom")
    names = ["quickstart", "shape", "varlen"] if args.workload == "all" else [args.workload]
    everything = {"date": time.strftime("%Y-%m-%d"), "device": args.device, "argv": sys.argv[1:]}
    for name in names:
        work = {**workload(name, args), "rlloom_overrides": args.rlloom}
        trl_work = {**work, "steps": args.trl_steps} if name == "quickstart" and args.trl_steps else work
        results = {}
        for side_name in args.sides:  # the numbers written after each side: a later failure keeps them
            results[side_name] = side(side_name, trl_work if side_name == "trl" else work, args)
            everything[name] = {"work": work, **{k: summary(v, work) for k, v in results.items()}}
            if args.out:
                with open(args.out, "w") as handle:
                    json.dump(everything, handle, indent=1)
        report(name, work, results)


if __name__ == "__main__":
    main()
