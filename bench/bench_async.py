"""``trainer.async_mode`` on one variable-length workload, in one invocation: ``sync``, ``one_step_off``,
``fully_async``, ``fully_async_partial`` (``fully_async`` with ``trainer.partial_rollout=true``) and
``fully_async_stream`` (``fully_async`` with ``trainer.stream_groups=true``: a step trains the first groups to
finish; ``rollout.max_batch_rows`` = (K + 1) x 8 x 8 so that the jobs a streamed call merges decode as one
batch), each a fresh ``rlloom train`` subprocess on the same work, then their samples/s and the ratios to sync,
how idle the generator and the trainer were, how many rows weight updates (streamed: or new prompts) interrupted
and how many stale groups a streamed run dropped (``trainer.stale_policy=drop``). The streamed flow with
partial rollouts: ``--modes fully_async_stream --rlloom trainer.partial_rollout=true`` (``--rlloom`` overrides go
to every mode's run).

The workload is ``bench_vs_trl.py``'s ``varlen`` shape: a tiny random Phi (hidden 256, 4 layers) whose EOS
has probability 1/64 at every step, so response lengths are geometric from 1 to the 256-token cap; here with
``model=tiny``'s byte tokenizer (259 tokens) in place of SmolLM2's 49,152, whose LM head would make
generation ~40x the update on this CPU and leave nothing to overlap; ``data=digits`` prompts, 8 prompts x 8
samples per step, the ``digit_fraction`` reward, GRPO; ``train_engine.micro_batch_size`` 8 in every mode (on this
CPU the one- and two-thread updates are both faster at 8 than at the engine's default 16: docs/performance.md).

- samples/s: the samples of steps 2 .. N-1 over their wall time (step 1 warms up, step N validates);
- idle fractions: for the async modes the run's ``async/trainer_idle_frac`` (time waiting for a batch) and
  ``async/generator_idle_frac`` (time on no generation job); for sync, whose one process does one thing at
  a time, the generator is idle while it trains and the trainer while it generates.

Every async mode gets ``--threads`` torch threads in all, split between the trainer and the rollout process
(2: one core each); sync runs in one process once per ``--sync-threads`` count (default: ``--threads``), and
the ratios are to the fastest sync (on a small model one thread can beat two). With ``sync (1t)`` measured and
``--threads 2``, the last line bounds any async mode from the sync runs' own sides (:func:`overlap_bound`).
``--repeats R`` runs every mode R times, round after round: the table gives each mode's medians and the lowest and
highest of its ratios to the fastest sync of the same round (one run decides little: sync's own samples/s moved by
up to 10 % and 18 % between identical runs on two machines of this kind, docs/performance.md).

    python bench/bench_async.py                      # 10 steps per mode, 2 threads, fully_async K=2
    python bench/bench_async.py --sync-threads 2 1 --out async.json
    python bench/bench_async.py --sync-threads 2 1 --modes sync fully_async --repeats 3
    python bench/bench_async.py --device cuda --steps 6 --modes sync one_step_off fully_async

``--device cuda`` runs every mode on the GPU: sync trains and generates there, an async mode's rollout process
generates on the same GPU while the trainer trains (one device shared in time, as a one-GPU machine allows; the
threads then matter little).
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile

from bench_vs_trl import VARLEN_TOKENS, varlen_folder

MODES = ("sync", "one_step_off", "fully_async", "fully_async_partial", "fully_async_stream")
PROMPTS, N = 8, 8
MICRO_BATCH = 8  # train_engine.micro_batch_size of every mode (``--rlloom`` overrides it)


def variant(mode: str, max_staleness: int) -> list[str]:
    """The overrides of ``mode``: its ``trainer.async_mode``, and for the variants of ``fully_async`` their keys."""
    variants = {"fully_async_partial": ["trainer.partial_rollout=true"],
                "fully_async_stream": ["trainer.stream_groups=true",
                                       f"rollout.max_batch_rows={(max_staleness + 1) * PROMPTS * N}"]}
    if mode in variants:
        return ["trainer.async_mode=fully_async", *variants[mode]]
    return [f"trainer.async_mode={mode}"]


def run_mode(mode: str, model: str, args: argparse.Namespace, threads: int) -> dict:
    """``rlloom train`` in ``mode`` with ``threads`` torch threads on the workload; its throughput and idle
    fractions."""
    from rlloom_trainer.testing import metric_rows

    run_dir = tempfile.mkdtemp(prefix=f"rlloom-bench-async-{mode}-")
    overrides = [
        "model=hf", f"model.path={model}", "data=digits", "reward=digit_fraction",
        f"trainer.run_dir={run_dir}", "trainer.trackers=[jsonl]", f"trainer.total_steps={args.steps}",
        f"trainer.train_batch_size={PROMPTS}", f"algorithm.n={N}", f"sampling.max_new_tokens={VARLEN_TOKENS}",
        "trainer.val_before_train=false", "trainer.test_freq=0", "trainer.val_max_prompts=1", "trainer.val_n=1",
        "trainer.val_greedy=false", "trainer.save_final_model=false", f"trainer.device={args.device}",
        f"launcher.num_threads={threads}", f"train_engine.micro_batch_size={MICRO_BATCH}",
        *variant(mode, args.max_staleness),
        f"trainer.max_staleness={args.max_staleness}", *args.rlloom,
    ]
    cli = "import sys; from rlloom.cli import main; sys.exit(main(sys.argv[1:]))"
    subprocess.run([sys.executable, "-c", cli, "train", *overrides], check=True, stdout=subprocess.DEVNULL)
    steps = [row for row in metric_rows(run_dir) if row["step"] > 0]
    timed = steps[1:-1]
    wall = steps[-2]["training/wall_clock_s"] - steps[0]["training/wall_clock_s"]
    sides = {}
    if mode == "sync":
        generating = sum(row["timing_s/gen"] for row in timed) / sum(row["timing_s/step"] for row in timed)
        trainer_idle, generator_idle = generating, 1.0 - generating
        sides = dict(gen_s=sum(row["timing_s/gen"] for row in timed) / len(timed),
                     rest_s=sum(row["timing_s/step"] - row["timing_s/gen"] for row in timed) / len(timed))
    else:
        trainer_idle, generator_idle = (steps[-2][f"async/{side}_idle_frac"] for side in ("trainer", "generator"))
    lengths = [row["response_length/mean"] for row in steps]
    return dict(samples_per_s=len(timed) * PROMPTS * N / wall, trainer_idle=trainer_idle, stale_groups=sum(
                    steps[-1].get(f"async/{what}", 0.0) for what in ("dropped", "regenerated")),
                generator_idle=generator_idle, response_len=sum(lengths) / len(lengths),
                staleness_max=max(row.get("async/staleness/max", 0.0) for row in steps),
                interrupted=sum(row.get("async/interrupted", 0.0) for row in steps), **sides)


def overlap_bound(results: dict, threads: int) -> float | None:
    """What an async mode with one core per side can reach against the fastest sync, from the sync runs' own
    sides: one thread generates a step in G and trains it in T seconds (``sync (1t)``), the fastest sync takes
    g + t; a perfect overlap of one-thread sides takes max(G, T), so async / sync <= (g + t) / max(G, T).
    None unless ``sync (1t)`` ran and ``threads`` (the async modes' total) is 2."""
    one, fastest = results.get("sync (1t)"), fastest_sync(results)
    if one is None or threads != 2:
        return None
    return (fastest["gen_s"] + fastest["rest_s"]) / max(one["gen_s"], one["rest_s"])


def fastest_sync(results: dict) -> dict | None:
    """The sync run of ``results`` (one round) with the most samples/s; None when no sync ran."""
    return max((result for name, result in results.items() if name.startswith("sync")),
               key=lambda result: result["samples_per_s"], default=None)


def ratios(results: dict) -> dict[str, float]:
    """Each run's samples/s over the fastest sync run's of the same round (empty when no sync ran)."""
    fastest = fastest_sync(results)
    if fastest is None:
        return {}
    return {name: result["samples_per_s"] / fastest["samples_per_s"] for name, result in results.items()}


def report(rounds: list[dict], threads: int) -> None:
    """The table of every mode's medians over ``rounds`` (its samples/s, its ratio to the same round's fastest
    sync, with the lowest and highest of those ratios when several rounds ran), then the bound per round."""
    from statistics import median

    per_round = [ratios(results) for results in rounds]
    print(f"\n{'mode':<27}{'samples/s':>10}{'x sync':>8}{'range':>12}{'trainer idle':>14}{'generator idle':>16}"
          f"{'max stale':>11}{'interrupted':>13}{'stale groups':>14}")
    for name in rounds[0]:
        runs = [results[name] for results in rounds]

        def middle(key: str) -> float:
            return median(run[key] for run in runs)

        ratio = [round_ratios[name] for round_ratios in per_round if round_ratios]
        spread = f"{min(ratio):.2f}-{max(ratio):.2f}" if len(ratio) > 1 else ""
        shown = f"{median(ratio):.2f}" if ratio else "-"
        print(f"{name:<27}{middle('samples_per_s'):>10.2f}{shown:>8}{spread:>12}{middle('trainer_idle'):>14.2f}"
              f"{middle('generator_idle'):>16.2f}{middle('staleness_max'):>11.0f}{middle('interrupted'):>13.0f}"
              f"{middle('stale_groups'):>14.0f}")
    bounds = [f"{bound:.2f}x (G {results['sync (1t)']['gen_s']:.2f}, T {results['sync (1t)']['rest_s']:.2f})"
              for results in rounds if (bound := overlap_bound(results, threads)) is not None]
    if bounds:
        print("a perfect overlap of one-thread sides, (g + t) / max(G, T) the fastest sync (G and T: one thread's "
              "generation and the rest of a step; g + t: the fastest sync's step), per round: " + ", ".join(bounds))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--steps", type=int, default=10, help="steps per mode (>= 3: the first and last are not timed)")
    parser.add_argument("--threads", type=int, default=2, help="torch threads of an async mode, in all")
    parser.add_argument("--sync-threads", type=int, nargs="+", help="sync's thread counts (default: --threads)")
    parser.add_argument("--max-staleness", type=int, default=2, help="trainer.max_staleness of fully_async")
    parser.add_argument("--modes", nargs="+", default=list(MODES), choices=MODES)
    parser.add_argument("--repeats", type=int, default=1, help="rounds of every run, one after the other: medians")
    parser.add_argument("--device", default="cpu", help="trainer.device of every run (cuda: both sides on one GPU)")
    parser.add_argument("--rlloom", action="append", default=[], metavar="OVERRIDE", help="added to every run")
    parser.add_argument("--out", help="also write the results as JSON here")
    args = parser.parse_args()
    if args.steps < 3 or args.repeats < 1:
        parser.error("--steps must be >= 3 and --repeats >= 1")
    from rlloom_models.tiny import build_tokenizer

    model = varlen_folder(build_tokenizer(1024))
    runs = [(mode, count) for mode in args.modes
            for count in ((args.sync_threads or [args.threads]) if mode == "sync" else [args.threads])]
    rounds = []
    for round_ in range(args.repeats):
        results = {}
        for mode, threads in runs:
            name = f"{mode} ({threads}t)"
            results[name] = run_mode(mode, model, args, threads)
            print(f"round {round_ + 1}, {name}: {json.dumps(results[name])}", flush=True)
        rounds.append(results)
    report(rounds, args.threads)
    if args.out:
        with open(args.out, "w", encoding="utf-8") as handle:
            json.dump({"args": vars(args), "rounds": rounds}, handle, indent=1)


if __name__ == "__main__":
    main()
