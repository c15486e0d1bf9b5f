"""``rlloom plan --profile`` end to end on the tiny preset (launcher=local: the two batch sizes, no doubled pool),
then ``rlloom plan --from`` on this machine described as a cluster: the profile holds a rate for every stage,
and the plan prints a winner as an ``rlloom train`` command. (A pure-Python suite covers the model; this is the
command as a user runs it — it once failed on an import no unit test reached.)"""

from __future__ import annotations

import json

import pytest
import yaml
from rlloom.cli import main


@pytest.mark.slow
def test_profile_then_plan_from_it(tmp_path, rlloom_tiny_model_cache, capsys):
    profile = tmp_path / "profile.json"
    config = ["preset=tiny", f"model.cache_dir={rlloom_tiny_model_cache}"]
    assert main(["plan", "--profile", "--steps", "2", "--out", str(profile), *config]) == 0
    rates = json.loads(profile.read_text())["rates"]
    assert {"gen", "train", "log_prob", "sync"} <= set(rates), rates
    # how the seconds split into a fixed part and a per-unit slope depends on the machine's load (a noisy pair of
    # batch sizes can fit a flat line, clamped to slope 0): only that generation and training took time is certain
    for stage in ("gen", "train"):
        assert rates[stage]["fixed_s"] >= 0 and rates[stage]["device_s"] >= 0, rates
        assert rates[stage]["fixed_s"] + rates[stage]["device_s"] > 0, rates

    cluster = tmp_path / "cluster.yaml"
    cluster.write_text(yaml.safe_dump({
        "nodes": 1, "devices_per_node": 2, "network_bandwidth": 1.0e9,
        "device": {"name": "cpu", "bf16_flops": 1.0e11, "memory_bytes": 4.0e9, "memory_bandwidth": 1.0e10,
                   "link_bandwidth": 1.0e9}}))
    capsys.readouterr()
    assert main(["plan", "--from", str(profile), f"cluster={cluster}", *config]) == 0
    out = capsys.readouterr().out
    assert "rlloom train" in out, out
