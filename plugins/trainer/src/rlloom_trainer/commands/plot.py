"""``rlloom plot RUN_DIR [RUN_DIR ...]``: PNG charts of runs' ``metrics.jsonl``.

One chart per topic (or, with ``metrics``, one per given name pattern); a chart plots every metric of
its topic that the runs logged (by name pattern) against the step, the runs overlaid. A metric that
never changes (a KL of 0 when KL is off) is left out, and a chart left with no data is not written.
The y axis spans at least :data:`MIN_SPAN` of the values' magnitude and is never offset, so a small
wiggle looks small.
"""

from __future__ import annotations

import argparse
import fnmatch
import json
import os
from collections.abc import Callable

# chart file stem → (title, y label, metric name patterns, stacked)
CHARTS: dict[str, tuple[str, str, tuple[str, ...], bool]] = {
    "reward": ("Training reward", "score", ("critic/score/mean", "critic/rewards/mean"), False),
    "val_accuracy": ("Validation accuracy", "accuracy", ("val-core/*", "val-aux/*"), False),
    "kl": ("KL", "KL", ("actor/kl_loss", "actor/ppo_kl", "actor/reward_kl_penalty"), False),
    "entropy": ("Policy entropy", "nats / token", ("actor/entropy",), False),
    "response_length": ("Response length", "tokens", ("response_length/mean", "response_length/max"), False),
    "step_time": ("Step time breakdown", "seconds", ("timing_s/*",), True),
}
EXCLUDED_FROM_STACK = ("timing_s/step", "timing_s/validation")
MIN_SPAN = 0.2
"""The y axis of a line chart spans at least this fraction of the largest absolute value plotted."""


def read_metrics(run_dir: str) -> list[dict]:
    """The rows of ``<run_dir>/metrics.jsonl`` (a torn last line is skipped)."""
    path = os.path.join(run_dir, "metrics.jsonl")
    if not os.path.isfile(path):
        raise FileNotFoundError(f"{path} does not exist: is {run_dir!r} an rlloom run folder?")
    rows = []
    with open(path, encoding="utf-8") as handle:
        for line in handle:
            try:
                rows.append(json.loads(line))
            except ValueError:
                continue
    return rows


def series(rows: list[dict], patterns: tuple[str, ...]) -> dict[str, tuple[list[int], list[float]]]:
    """metric name → (steps, values) for every metric matching one of ``patterns`` (nulls skipped)."""
    found: dict[str, tuple[list[int], list[float]]] = {}
    for row in rows:
        for key, value in row.items():
            if isinstance(value, (int, float)) and any(fnmatch.fnmatchcase(key, p) for p in patterns):
                steps, values = found.setdefault(key, ([], []))
                steps.append(int(row["step"]))
                values.append(float(value))
    return found


def varies(points: tuple[list[int], list[float]]) -> bool:
    """Whether a metric's values change (a metric logged once counts as varying)."""
    values = points[1]
    return len(values) == 1 or min(values) != max(values)


def chart_data(runs: dict[str, list[dict]], patterns: tuple[str, ...], stacked: bool
               ) -> dict[str, tuple[list[int], list[float]]]:
    """Legend label → (steps, values) of the metrics matching ``patterns`` in each run (labels carry the run's
    name when there are several runs); constant metrics are left out of line charts."""
    data = {}
    for run, rows in runs.items():
        if stacked:  # training steps only: step 0 holds the initial validation alone
            found = series([row for row in rows if row["step"] > 0], patterns)
            found = {name: points for name, points in found.items() if name not in EXCLUDED_FROM_STACK}
        else:
            found = {name: points for name, points in series(rows, patterns).items() if varies(points)}
        data.update({(f"{run}: {name}" if len(runs) > 1 else name): points for name, points in found.items()})
    return data


def widen(axes) -> None:
    """Make the y axis span at least :data:`MIN_SPAN` of the largest absolute value shown."""
    low, high = axes.get_ylim()
    span = MIN_SPAN * max(abs(low), abs(high))
    if high - low < span:
        middle = (low + high) / 2
        axes.set_ylim(middle - span / 2, middle + span / 2)


def plot_run(run_dirs: str | list[str], out_dir: str | None = None, metrics: list[str] | None = None) -> list[str]:
    """Write the charts of the runs ``run_dirs`` (one folder or several, overlaid) into ``out_dir``
    (default ``<run_dir>/plots`` for one run; required for several); returns the paths written.
    ``metrics``: name patterns (``actor/kl_loss``, ``reward/*``), one chart each, instead of the topics."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.ticker import MaxNLocator

    run_dirs = [run_dirs] if isinstance(run_dirs, str) else list(run_dirs)
    if out_dir is None and len(run_dirs) > 1:
        from rlloom.config import ConfigError

        raise ConfigError(f"{len(run_dirs)} runs are plotted together into one folder: name it with --out")
    names = [os.path.basename(os.path.normpath(run)) for run in run_dirs]
    runs = {name if names.count(name) == 1 else run: read_metrics(run) for name, run in zip(names, run_dirs)}
    out_dir = out_dir or os.path.join(run_dirs[0], "plots")
    os.makedirs(out_dir, exist_ok=True)
    charts = CHARTS if not metrics else {
        pattern.replace("/", "_").replace("*", "all"): (pattern, "value", (pattern,), False) for pattern in metrics}
    written = []
    for stem, (title, ylabel, patterns, stacked) in charts.items():
        if stacked and len(runs) > 1:  # several runs: their step times, not their stages stacked on each other
            stacked, patterns = False, ("timing_s/step",)
        data = chart_data(runs, patterns, stacked)
        if not data:
            continue
        figure, axes = plt.subplots(figsize=(7, 4), dpi=100)
        if stacked:
            _stack(axes, data)
        else:
            for name, (steps, values) in sorted(data.items()):
                axes.plot(steps, values, marker="o", markersize=3, label=name)
            axes.ticklabel_format(axis="y", useOffset=False)
            widen(axes)
        axes.set(title=title, xlabel="step", ylabel=ylabel)
        axes.xaxis.set_major_locator(MaxNLocator(integer=True))
        axes.grid(alpha=0.3)
        axes.legend(fontsize=7)
        figure.tight_layout()
        path = os.path.join(out_dir, f"{stem}.png")
        figure.savefig(path)
        plt.close(figure)
        written.append(path)
    return written


def _stack(axes, data: dict[str, tuple[list[int], list[float]]]) -> None:
    """Stacked areas over the steps every stage has in common (a stage missing at a step counts 0)."""
    steps = sorted({step for s, _ in data.values() for step in s})
    names = sorted(data)
    layers = []
    for name in names:
        by_step = dict(zip(*data[name]))
        layers.append([by_step.get(step, 0.0) for step in steps])
    axes.stackplot(steps, layers, labels=[name.removeprefix("timing_s/") for name in names])


def cmd_plot(args: argparse.Namespace) -> int:
    """Plot the runs ``args.run_dirs``; print each chart's path."""
    for path in plot_run(args.run_dirs, args.out, args.metrics):
        print(path)
    return 0


def command(parser: argparse.ArgumentParser) -> Callable[[argparse.Namespace], int]:
    """write PNG charts of runs' metrics

    Adds ``rlloom plot``'s arguments to ``parser``; returns :func:`cmd_plot`."""
    parser.description = ("Charts of RUN_DIR/metrics.jsonl: reward, validation accuracy, KL, entropy, response "
                          "length, step-time breakdown (metrics that never change are left out); several runs are "
                          "overlaid.")
    parser.add_argument("run_dirs", metavar="RUN_DIR", nargs="+")
    parser.add_argument("--out", help="output folder (default: RUN_DIR/plots; required for several runs)")
    parser.add_argument("--metrics", nargs="+", metavar="PATTERN",
                        help="one chart per metric name pattern instead (actor/kl_loss 'reward/*')")
    return cmd_plot
