"""``rlloom_trainer.testing``: metric rows of a hand-written ``metrics.jsonl``, and ``entry_point_registry``
on real installed distributions (the core's own, and ones written to a folder on ``sys.path``)."""

from __future__ import annotations

import importlib
import json
import subprocess
import sys

import pytest
from rlloom_trainer.testing import comparable_rows, entry_point_registry, metric_rows, training_rows

ROWS = [
    {"step": 0, "critic/score/mean": 0.5, "val-core/digits/acc/mean@2": 0.1},  # validation before training
    {"step": 1, "critic/score/mean": 0.25, "dapo/gen_rounds": 2},
    {"step": 2, "actor/pg_loss": 0.3},
    {"step": 3, "critic/score/mean": None},  # a non-finite score is logged as null: still reported
]


def install(folder, dist: str, entry_point: str, module: str, source: str) -> None:
    """Install distribution ``dist`` into ``folder`` (on ``sys.path``): module ``module`` holding
    ``source``, declared as entry point ``entry_point`` of group rlloom."""
    (folder / f"{module}.py").write_text(source)
    info = folder / f"{dist.replace('-', '_')}-1.0.dist-info"
    info.mkdir()
    (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {dist}\nVersion: 1.0\n")
    (info / "entry_points.txt").write_text(f"[rlloom]\n{entry_point} = {module}\n")
    importlib.invalidate_caches()


def test_metric_rows_reads_every_row_and_training_rows_keeps_training_steps_with_the_key(tmp_path):
    (tmp_path / "metrics.jsonl").write_text("".join(json.dumps(row) + "\n" for row in ROWS))
    rows = metric_rows(tmp_path)
    assert rows == ROWS and metric_rows(str(tmp_path)) == ROWS
    assert training_rows(rows) == [ROWS[1], ROWS[3]]
    assert training_rows(rows, key="dapo/gen_rounds") == [ROWS[1]]
    assert training_rows(rows, key="val-core/digits/acc/mean@2") == []


def test_comparable_rows_drop_timings_memory_wall_clock_and_the_resume_marker_only():
    rows = [{"step": 1, "timing_s/gen": 0.2, "perf/cpu_memory_peak_gb": 4.0, "training/wall_clock_s": 9.0,
             "training/resumed_from_step": 0.0, "training/rollout_probs_diff_mean": 0.01, "actor/pg_loss": 0.3}]
    assert comparable_rows(rows) == [{"step": 1, "training/rollout_probs_diff_mean": 0.01, "actor/pg_loss": 0.3}]


def test_a_torn_line_is_an_error_naming_the_line(tmp_path):
    (tmp_path / "metrics.jsonl").write_text('{"step": 0}\n{"step": 1, "x": 2.0}\n{"step": 2, "x"')
    with pytest.raises(ValueError, match=r"metrics\.jsonl line 3 is not a JSON row .*'\{\"step\": 2, \"x\"'"):
        metric_rows(tmp_path)


def test_entry_point_registry_loads_that_entry_point_alone():
    registry = entry_point_registry("core")
    assert [(s.entry_point, s.distribution, s.status) for s in registry.statuses] == [("core", "rlloom", "loaded")]
    assert registry.choices("dispatch_mode") == ["one_to_all", "rank_zero"] and registry.choices("launcher") == []


def test_a_missing_entry_point_fails_naming_it():
    with pytest.raises(AssertionError, match="^entry point 'rlloom_no_such_plugin' in group 'rlloom': expected one "
                                             "installed distribution providing it, found none$"):
        entry_point_registry("rlloom_no_such_plugin")


def test_a_plugin_that_fails_to_load_fails_with_its_traceback(tmp_path, monkeypatch):
    monkeypatch.syspath_prepend(str(tmp_path))
    install(tmp_path, "rlloom-testing-broken", "testing_broken", "rlloom_testing_broken",
            'raise RuntimeError("reward table is corrupt")\n')
    with pytest.raises(AssertionError) as caught:
        entry_point_registry("testing_broken")
    first_line, _, rest = str(caught.value).partition("\n")
    assert first_line == ("entry point 'testing_broken' of rlloom-testing-broken failed to load: "
                          "RuntimeError: reward table is corrupt")
    assert rest.startswith("Traceback (most recent call last):") and 'rlloom_testing_broken.py", line 1' in rest


def test_an_entry_point_two_distributions_provide_fails_naming_both(tmp_path, monkeypatch):
    monkeypatch.syspath_prepend(str(tmp_path))
    install(tmp_path, "rlloom-testing-twin", "core", "rlloom_testing_twin", "")
    with pytest.raises(AssertionError, match="^entry point 'core' in group 'rlloom': expected one installed "
                                             "distribution providing it, found rlloom, rlloom-testing-twin$"):
        entry_point_registry("core")


def test_importing_it_imports_no_package_beyond_rlloom_and_itself():
    code = ("import json, sys, rlloom\n"
            "before = set(sys.modules)\n"
            "import rlloom_trainer.testing\n"
            "new = {name.split('.')[0] for name in set(sys.modules) - before}\n"
            "print(json.dumps(sorted(new - set(sys.stdlib_module_names) - {n for n in new if n.startswith('_')})))\n")
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr
    assert json.loads(result.stdout.splitlines()[-1]) == ["rlloom", "rlloom_trainer"]
