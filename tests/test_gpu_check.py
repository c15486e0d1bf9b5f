"""``scripts/gpu_check.sh``: its ``--plan`` on this machine (so the script cannot rot between GPU
loans), and the machinery of a check run with real commands standing in for the parts: budgets and
the hard stop, outcomes, JUnit counting, targets and the report files."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "scripts"))
import gpu_check  # noqa: E402


def test_plan_lists_every_part_with_its_budget_and_checks_the_carry_size():
    done = subprocess.run([os.path.join(ROOT, "scripts", "gpu_check.sh"), "--plan"], capture_output=True, text=True,
                          env={**os.environ, "PYTHON": sys.executable})
    assert done.returncode in (0, 1), done.stderr
    for part in gpu_check.PARTS:
        assert f"{part.name:20}{part.budget_s:9d}" in done.stdout
    assert f"hard stop {gpu_check.HARD_STOP_S} s" in done.stdout
    assert f"required parts: {gpu_check.worst_case_s(gpu_check.PARTS)} s" in done.stdout
    assert "working tree:" in done.stdout and "MiB" in done.stdout
    fits = "TOO LARGE" not in done.stdout
    assert done.returncode == (0 if fits else 1)


def test_the_required_parts_fit_the_hard_stop_and_the_optional_ones_come_last():
    """Setup parts, then the test parts side by side, then the benchmarks: the required parts' budgets
    add up to no more than the hard stop, so each gets its whole budget; optional ones run last."""
    by_kind = {kind: [part.budget_s for part in gpu_check.PARTS if part.kind == kind and part.required]
               for kind in ("probe", "tests", "bench")}
    worst = sum(by_kind["probe"]) + max(by_kind["tests"]) + sum(by_kind["bench"])
    assert gpu_check.worst_case_s(gpu_check.PARTS) == worst <= gpu_check.HARD_STOP_S
    required = [part.required for part in gpu_check.PARTS if part.kind == "bench"]
    assert required == sorted(required, reverse=True)
    names = [part.name for part in gpu_check.PARTS]
    assert len(names) == len(set(names))


def test_junit_counts_read_a_real_pytest_run(tmp_path):
    (tmp_path / "test_sample.py").write_text(textwrap.dedent("""
        import pytest
        def test_ok(): assert True
        def test_bad(): assert 1 == 2
        @pytest.mark.skip(reason="for a reason")
        def test_skipped(): pass
    """))
    junit = tmp_path / "junit.xml"
    subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", f"--junitxml={junit}",
                    str(tmp_path / "test_sample.py")], cwd=tmp_path, capture_output=True)
    counts = gpu_check.junit_counts(str(junit))
    assert (counts["passed"], counts["failed"], counts["errors"], counts["skipped"]) == (1, 1, 0, 1)
    assert counts["failed_ids"] == ["test_sample::test_bad"] and counts["passed_ids"] == ["test_sample::test_ok"]
    assert counts["skip_reasons"] == {"for a reason": 1}
    assert gpu_check.junit_counts(str(tmp_path / "absent.xml")) == {}


def test_log_counts_read_verbose_lines_of_an_interrupted_run():
    log = ("[gw0] [ 10%] PASSED a/test_x.py::test_one \n[gw1] [ 20%] FAILED a/test_x.py::test_two[cpu] \n"
           "a/test_x.py::test_three SKIPPED (why) \nsomething PASSED without an id\n")
    counts = gpu_check.log_counts(log)
    assert (counts["passed"], counts["failed"], counts["skipped"]) == (1, 1, 1)
    assert counts["failed_ids"] == ["a/test_x.py::test_two[cpu]"]


def test_targets_are_met_missed_or_not_measured():
    part = gpu_check.Part("p", 1, "bench", [], "", targets={"fast": ("a.step_s", "<=", 0.27),
                                                             "many": ("b", ">=", 26.0),
                                                             "absent": ("c.d", ">=", 1.0)})
    results = gpu_check.check_targets(part, {"a": {"step_s": 0.3}, "b": 26.0})
    assert results == {"fast": {"value": 0.3, "met": False}, "many": {"value": 26.0, "met": True},
                       "absent": {"value": None, "met": None}}


def _part(name: str, budget_s: int, code: str, kind: str = "bench", needs: tuple[str, ...] = ()) -> gpu_check.Part:
    return gpu_check.Part(name, budget_s, kind, [sys.executable, "-c", code], f"the {name} part", needs)


def test_a_run_never_stops_at_a_failure_and_keeps_to_its_budgets(tmp_path):
    writes_json = "import sys, json; json.dump({'speedup': 6.0}, open(sys.argv[sys.argv.index('--out') + 1], 'w'))"
    parts = (
        _part("crashes", 10, "raise RuntimeError('the first error line')"),
        _part("sleeps", 2, "import time; time.sleep(60)"),
        _part("absent", 10, "pass", needs=("no_such_module_here",)),
        gpu_check.Part("measures", 10, "bench", [sys.executable, "-c", writes_json, "--out", "{json}"], "numbers",
                       targets={"speed-up >= 5": ("speedup", ">=", 5.0)}),
        _part("late", 10, "pass"),
    )
    reported = []
    entries = gpu_check.run_parts(parts, str(tmp_path), hard_stop_s=12,
                                  finished=lambda so_far: reported.append([entry["name"] for entry in so_far]))
    assert reported == [[part.name for part in parts[:count]] for count in range(1, len(parts) + 1)]
    outcome = {entry["name"]: entry for entry in entries}
    assert outcome["crashes"]["outcome"] == "failed"
    assert any("RuntimeError: the first error line" in line for line in outcome["crashes"]["first_error_lines"])
    assert outcome["sleeps"]["outcome"] == "timed_out" and outcome["sleeps"]["seconds"] < 10
    assert outcome["absent"] == {**outcome["absent"], "outcome": "skipped",
                                 "why": "not installed here: no_such_module_here"}
    assert outcome["measures"]["outcome"] == "passed"
    assert outcome["measures"]["targets"] == {"speed-up >= 5": {"value": 6.0, "met": True}}
    assert outcome["late"]["outcome"] == "passed"

    out = tmp_path / "out"
    out.mkdir()
    gpu_check.write_report(entries, str(out), seconds=12.0, hard_stop_s=12)
    report = json.loads((out / "gpu_report.json").read_text())
    assert [part["name"] for part in report["parts"]] == [part.name for part in parts]
    assert all("log_tail" not in part for part in report["parts"])
    page = (out / "gpu_report.md").read_text()
    assert "| crashes | failed |" in page and "| sleeps | timed_out |" in page
    assert "speed-up >= 5: 6.0 (met)" in page
    assert "===== crashes (failed)" in (out / "gpu_logs.txt").read_text()


def test_the_hard_stop_ends_a_part_that_ignores_sigint_and_skips_what_no_longer_fits(tmp_path):
    stubborn = "import signal, time; signal.signal(signal.SIGINT, signal.SIG_IGN); time.sleep(60)"
    parts = (_part("first", 30, stubborn), _part("second", 30, "pass"))
    entries = gpu_check.run_parts(parts, str(tmp_path), hard_stop_s=6)
    assert entries[0]["outcome"] == "timed_out" and 3 <= entries[0]["seconds"] < 8
    assert entries[1] == {**entries[1], "outcome": "skipped", "why": "the check's hard stop was reached"}


@pytest.mark.parametrize("log, first", [
    ("collected 3 items\nE   AssertionError: 1 != 2\nFAILED t.py::test_a\n", "E   AssertionError: 1 != 2"),
    ("line one\nline two\n", "line one"),
])
def test_first_error_lines_prefer_error_lines(log, first):
    assert gpu_check.first_error_lines(log)[0] == first
