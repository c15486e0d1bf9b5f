"""``bench/profile_train.py`` keeps working between GPU loans: both profilers on the tiny preset, on
the CPU, in a fresh process (the script patches ``Trainer.log``)."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def profile(tmp_path, profiler: str) -> dict:
    out = tmp_path / f"{profiler}.json"
    done = subprocess.run([sys.executable, "profile_train.py", "--device", "cpu", "--steps", "3", "--profiler", profiler,
                           "--out", str(out), "preset=tiny"], cwd=os.path.join(ROOT, "bench"), capture_output=True,
                          text=True, env={**os.environ, "TMPDIR": str(tmp_path)})
    assert done.returncode == 0, done.stderr[-3000:]
    assert not list(tmp_path.glob("rlloom-profile-*")), "the run folder is removed"
    return json.loads(out.read_text())


@pytest.mark.slow
def test_torch_profiler_tables_hold_the_steps_operators(tmp_path):
    result = profile(tmp_path, "torch")
    assert result["profiler"] == "torch" and result["steps_profiled"] == 2
    assert result["breakdown"]["timing_s/update_actor"] > 0
    host = {row["operator"]: row for row in result["by_own_host_time"]}
    assert "aten::mm" in host and host["aten::mm"]["calls"] > 0 and host["aten::mm"]["own_host_s"] > 0
    assert sum(row["own_host_s"] for row in result["by_own_host_time"]) <= result["wall_s"]
    assert result["device_busy_s"] == 0 and result["device_busy_fraction"] == 0  # no device on the CPU


@pytest.mark.slow
def test_cprofile_tables_hold_the_trainer(tmp_path):
    result = profile(tmp_path, "cprofile")
    functions = [row["function"] for row in result["by_cumulative"]]
    assert any("rlloom" in function for function in functions)
    assert all(row["calls"] > 0 and row["cumulative_s"] >= 0 for row in result["by_cumulative"])
