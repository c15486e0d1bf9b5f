"""``rlloom plot``: flat metrics left out, a minimum y span, ``--metrics``, several runs overlaid."""

from __future__ import annotations

import json
import os

from rlloom.cli import main
from rlloom_trainer.commands.plot import chart_data, read_metrics


def write_run(folder, rows: list[dict]) -> str:
    os.makedirs(folder)
    with open(os.path.join(folder, "metrics.jsonl"), "w", encoding="utf-8") as handle:
        handle.writelines(json.dumps(row) + "\n" for row in rows)
    return str(folder)


def rows(reward_step: float) -> list[dict]:
    """Four steps: a rising reward, a KL that is always 0 (KL off), a 0.12-token dip in response length, and a
    plugin's own metric."""
    return [{"step": step, "critic/score/mean": reward_step * step, "actor/ppo_kl": 0.0,
             "response_length/mean": 10.0 - (0.12 if step == 2 else 0.0), "reward/format/mean": 0.1 * step}
            for step in range(1, 5)]


def test_a_flat_metric_gets_no_chart_and_a_dip_keeps_its_scale(tmp_path, capsys):
    run = write_run(tmp_path / "run", rows(0.25))
    out = tmp_path / "plots"
    assert main(["plot", run, "--out", str(out)]) == 0
    assert sorted(os.listdir(out)) == ["response_length.png", "reward.png"]  # no flat-zero KL chart
    assert capsys.readouterr().out.split() == [str(out / "reward.png"), str(out / "response_length.png")]


def test_the_y_axis_spans_at_least_a_fifth_of_the_values(tmp_path):
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from rlloom_trainer.commands.plot import widen

    figure, axes = plt.subplots()
    axes.plot([1, 2, 3, 4], [10.0, 9.88, 10.0, 10.0])
    assert axes.get_ylim()[1] - axes.get_ylim()[0] < 0.2  # matplotlib alone zooms into the dip
    widen(axes)
    low, high = axes.get_ylim()
    assert high - low >= 0.2 * 10.0 - 1e-9 and low < 9.88 and high > 10.0
    plt.close(figure)


def test_metrics_option_charts_any_metric(tmp_path):
    run = write_run(tmp_path / "run", rows(0.25))
    out = tmp_path / "plots"
    assert main(["plot", run, "--out", str(out), "--metrics", "reward/*", "actor/ppo_kl"]) == 0
    assert os.listdir(out) == ["reward_all.png"]  # the flat KL is still left out


def test_two_runs_are_overlaid(tmp_path, capsys):
    first, second = write_run(tmp_path / "a", rows(0.25)), write_run(tmp_path / "b", rows(0.1))
    assert main(["plot", first, second]) == 2
    assert "--out" in capsys.readouterr().err
    out = tmp_path / "both"
    assert main(["plot", first, second, "--out", str(out)]) == 0
    assert sorted(os.listdir(out)) == ["response_length.png", "reward.png"]
    data = chart_data({"a": read_metrics(first), "b": read_metrics(second)}, ("critic/score/mean",), False)
    assert data == {"a: critic/score/mean": ([1, 2, 3, 4], [0.25, 0.5, 0.75, 1.0]),
                    "b: critic/score/mean": ([1, 2, 3, 4], [0.1, 0.2, 0.1 * 3, 0.4])}
