"""``rlloom plot RUN_DIR``: PNG charts of a run's ``metrics.jsonl``.

One chart per topic; a chart plots every metric of its topic that the run logged (by name pattern),
against the step. Charts with no data are not written.
"""

from __future__ import annotations

import fnmatch
import json
import os

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


def plot_run(run_dir: str, out_dir: str | None = None) -> list[str]:
    """Write the charts of ``run_dir`` into ``out_dir`` (default ``<run_dir>/plots``); returns the
    paths written."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.ticker import MaxNLocator

    rows = read_metrics(run_dir)
    out_dir = out_dir or os.path.join(run_dir, "plots")
    os.makedirs(out_dir, exist_ok=True)
    written = []
    for stem, (title, ylabel, patterns, stacked) in CHARTS.items():
        if stacked:  # training steps only: step 0 holds the initial validation alone
            data = series([row for row in rows if row["step"] > 0], patterns)
            data = {name: points for name, points in data.items() if name not in EXCLUDED_FROM_STACK}
        else:
            data = series(rows, patterns)
        if not data:
            continue
        figure, axes = plt.subplots(figsize=(7, 4), dpi=100)
        if stacked:
            _stack(axes, data)
        else:
            for name, (steps, values) in sorted(data.items()):
                axes.plot(steps, values, marker="o", markersize=3, label=name)
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
