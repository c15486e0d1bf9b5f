"""Every installed plugin registers without importing torch (its heavy modules are named as
``"module:attribute"`` factories, imported when first built), and a config error is reported
before torch loads: the shape that keeps ``rlloom plugins`` and config errors fast."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap

import pytest

HEAVY = ("torch", "tensordict", "transformers", "ray", "vllm", "numpy")


def run_python(code: str, cwd: str | None = None) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-c", textwrap.dedent(code)], capture_output=True, text=True, timeout=300,
                          cwd=cwd)


def test_every_plugin_registers_without_heavy_imports():
    # The heavy packages are made unimportable: a plugin that imports one while registering fails.
    done = run_python(f"""
        import json, sys
        for name in {HEAVY!r}:
            sys.modules[name] = None
        from rlloom.plugins.registry import get_registry
        registry = get_registry()
        print(json.dumps({{"failed": {{s.entry_point: s.error for s in registry.failed()}},
                          "loaded": sorted(s.entry_point for s in registry.statuses)}}))
    """)
    assert done.returncode == 0, done.stderr
    report = json.loads(done.stdout)
    assert report["failed"] == {}, report["failed"]
    assert {"core", "trainer", "grpo", "ppo", "fsdp", "hf", "tasks", "models"} <= set(report["loaded"])


@pytest.mark.parametrize("overrides, named", [
    ("trainer.seed=-1", "trainer.seed=-1"),
    ("algorithm.adv_estimator=grpo_passkk", "algorithm.adv_estimator=grpo_passkk"),
    ("=5", "the override '=5'"), ("model.hidden_size=60 model.num_heads=4", "model.hidden_size=60"),
    ("trainer.val_temperature=-1", "trainer.val_temperature=-1"), ("sampling.top_k=-7", "sampling.top_k=-7"),
    ("trainer.test_freq=-3", "trainer.test_freq=-3"),
    ("data=files data.train_files=[/dev/null] data.val_fraction=0.5", "data.train_files: '/dev/null' is not a regular"),
    ("data=files data.train_files=[/no/such.jsonl] data.val_fraction=0.5", "data.train_files: no such file"),
    # issue 38: refused by the run's own checks (rlloom_trainer.run.check_run), which once came after torch loaded
    ("trainer.resume=/no/such/checkpoint", "trainer.resume=/no/such/checkpoint"),
    ("trainer.run_dir=/proc/x", "trainer.run_dir=/proc/x"), ("trainer.run_dir=/dev/null/run", "trainer.run_dir"),
    ("launcher=ray launcher.address=nonsense", "launcher.address=nonsense: expected host:port"),
    ("launcher=ray launcher.address=127.0.0.1:1", "launcher.address=127.0.0.1:1: no Ray cluster answers there"),
])
def test_a_config_error_is_reported_before_torch_loads(overrides, named, tmp_path):
    """Exit status 2, the key named, torch not imported and no run folder left (in the working directory)."""
    done = run_python(f"""
        import sys
        from rlloom.cli import main
        status = main(["train", "preset=tiny", *{overrides.split()!r}])
        print(status, "torch" in sys.modules)
    """, cwd=tmp_path)
    assert done.stdout.split() == ["2", "False"], (done.stdout, done.stderr)
    assert named in done.stderr
    assert os.listdir(tmp_path) == []


def test_resume_never_on_a_folder_with_checkpoints_is_refused_before_torch_loads(tmp_path):
    """``trainer.resume=never`` where a complete checkpoint lies (its manifest, listing no files): exit status 2,
    torch not imported, nothing written into the run folder."""
    checkpoint = tmp_path / "run" / "checkpoints" / "global_step_2"
    checkpoint.mkdir(parents=True)
    (checkpoint / "manifest.json").write_text(json.dumps({"step": 2, "files": {}}))
    done = run_python(f"""
        import sys
        from rlloom.cli import main
        status = main(["train", "preset=tiny", "trainer.run_dir={tmp_path / 'run'}", "trainer.resume=never"])
        print(status, "torch" in sys.modules)
    """)
    assert done.stdout.split() == ["2", "False"], (done.stdout, done.stderr)
    assert f"trainer.resume=never but trainer.run_dir={tmp_path / 'run'} already holds checkpoints" in done.stderr
    assert os.listdir(tmp_path / "run") == ["checkpoints"]


def test_a_lazy_factory_builds_the_named_class():
    done = run_python("""
        import sys
        from rlloom.plugins.registry import get_registry
        component = get_registry().get("algorithm", "grpo")
        print(component.target, "torch" in sys.modules)
        from rlloom_algokit.grpo import GRPO
        print(component.factory is GRPO, "torch" in sys.modules)
    """)
    assert done.stdout.split() == ["rlloom_algokit.grpo:GRPO", "False", "True", "True"], done.stderr
