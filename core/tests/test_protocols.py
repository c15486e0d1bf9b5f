"""The contract module: torch-free, and the optional abilities asked with ``isinstance`` (never probed by
name anywhere in the repository)."""

from __future__ import annotations

import inspect
import pathlib
import re
import subprocess
import sys

from rlloom import protocols
from rlloom.protocols import Closable, PlansOptimizerSteps, ReportsMetrics

ROOT = pathlib.Path(__file__).resolve().parents[2]
SOURCES = [ROOT / "core" / "src", *ROOT.glob("kits/*/src"), *ROOT.glob("backends/*/src"),
           *ROOT.glob("plugins/*/src"), *ROOT.glob("algorithms/*/src")]


def test_importing_the_contract_imports_no_torch():
    code = "import sys, rlloom.protocols; print('torch' in sys.modules)"
    assert subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          check=True).stdout.strip() == "False"


def ability_members() -> set[str]:
    """The members of every optional ability: the runtime-checkable protocols other than the main ones."""
    main = {"RolloutEngine", "AsyncRolloutEngine", "TrainEngine", "Resharder", "DistributedResharder",
            "RewardFn", "Algorithm", "Tracker", "Future", "RemoteHandle"}
    members = set()
    for name, value in vars(protocols).items():
        if inspect.isclass(value) and getattr(value, "_is_runtime_protocol", False) and name not in main:
            own = {*vars(value), *vars(value).get("__annotations__", {})}
            members |= {member for member in own if not member.startswith("_")}
    return members


def test_no_plugin_or_core_module_probes_an_ability_by_name():
    members = ability_members()
    assert {"metrics", "check_model", "optimizer_steps_per_step", "extra_roles", "check_roles", "rewind", "close", "num_invalid",
            "single_process_overrides", "load_weights_from_dir", "live_weights", "borrow_weights", "pool_of",
            "pools"} <= members
    probe = re.compile(r"\b(?:getattr|hasattr)\([^,()]+,\s*[\"'](\w+)[\"']")
    found = [f"{path.relative_to(ROOT)}: {name}" for source in SOURCES for path in source.rglob("*.py")
             for name in probe.findall(path.read_text()) if name in members]
    assert found == []


def test_an_object_has_an_ability_exactly_when_it_has_the_member():
    class Engine:
        def metrics(self) -> dict[str, float]:
            return {}

    assert isinstance(Engine(), ReportsMetrics) and not isinstance(Engine(), Closable)
    assert not isinstance(object(), PlansOptimizerSteps)
