"""The installed ``rlloom`` console script, run in subprocesses as a user would run it.

``rlloom plugins --json`` runs against the real installation. Every other command runs with
``RLLOOM_PLUGINS`` restricted to a test distribution (a ``.dist-info`` folder on ``PYTHONPATH``)
that provides every default option, so the results do not depend on which rlloom plugins are
installed (``launcher=ray`` must stay uninstalled, ``trainer.total_stepz`` needs every default).
"""

from __future__ import annotations

import importlib.metadata
import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

CHECKOUT = Path(__file__).resolve().parents[2]  # our distributions install from its folders (not on PyPI yet)

RLLOOM = Path(sys.executable).parent / "rlloom"

DEFAULTS_PLUGIN = """
from dataclasses import dataclass

from rlloom import hookimpl


@dataclass
class Empty:
    pass


@hookimpl
def register_algorithms(register):
    register("grpo", Empty, config=Empty)


@hookimpl
def register_rollout_engines(register):
    register("hf", Empty, config=Empty)


@hookimpl
def register_train_engines(register):
    register("fsdp", Empty, config=Empty)


@hookimpl
def register_reward_fns(register):
    register("arithmetic", Empty, config=Empty)


@hookimpl
def register_datasets(register):
    register("arithmetic", Empty, config=Empty)


@hookimpl
def register_models(register):
    register("smollm2-135m", Empty, config=Empty)


@hookimpl
def register_resharders(register):
    register("in_process", Empty, config=Empty)
"""


def run_rlloom(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess:
    assert RLLOOM.exists(), f"console script not installed next to {sys.executable}"
    base = {k: v for k, v in os.environ.items() if k not in ("RLLOOM_PLUGINS", "PYTHONPATH")}
    return subprocess.run([str(RLLOOM), *args], env={**base, **(env or {})}, capture_output=True, text=True,
                          timeout=120)


@pytest.fixture(scope="module")
def defaults_only(tmp_path_factory) -> dict[str, str]:
    """Environment in which only the core, rlloom-trainer (``rlloom train``), the agent kit (``agent=single_turn``)
    and a test distribution providing every other default load."""
    folder = tmp_path_factory.mktemp("cli_plugin")
    (folder / "rlloom_test_cli_defaults.py").write_text(textwrap.dedent(DEFAULTS_PLUGIN))
    info = folder / "rlloom_test_cli_defaults-0.1.0.dist-info"
    info.mkdir()
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: rlloom-test-cli-defaults\nVersion: 0.1.0\n")
    (info / "entry_points.txt").write_text("[rlloom]\ncli_defaults = rlloom_test_cli_defaults\n")
    return {"PYTHONPATH": str(folder), "RLLOOM_PLUGINS": "cli_defaults,trainer,agentkit"}


def test_plugins_json_lists_core_builtins():
    result = run_rlloom("plugins", "--json")
    assert result.returncode == 0, result.stderr
    rows = json.loads(result.stdout)
    version = importlib.metadata.version("rlloom")
    core_rows = sorted((r["kind"], r["name"]) for r in rows if r["distribution"] == "rlloom")
    assert core_rows == [("dispatch_mode", "one_to_all"), ("dispatch_mode", "rank_zero")]
    for row in rows:
        if row["distribution"] == "rlloom":
            assert (row["version"], row["status"]) == (version, "loaded")
    enginekit_rows = sorted((r["kind"], r["name"]) for r in rows if r["distribution"] == "rlloom-enginekit")
    assert enginekit_rows == [("dispatch_mode", "dp_split"), ("dispatch_mode", "dp_split_rollout"),
                              ("dispatch_mode", "dp_split_tokens"), ("dispatch_mode", "dp_split_uneven"),
                              ("resharder", "in_process")]
    algokit_rows = sorted((r["kind"], r["name"]) for r in rows if r["distribution"] == "rlloom-algokit")
    assert algokit_rows == [("advantage_estimator", "grpo"), ("policy_loss", "vanilla")]
    trainer_rows = sorted((r["kind"], r["name"]) for r in rows if r["distribution"] == "rlloom-trainer")
    assert trainer_rows == sorted([("launcher", "local"),
                                   *(("command", name) for name in ("train", "eval", "generate", "chat", "export", "plot",
                                                                    "plugins")),
                                   *(("tracker", name) for name in ("console", "jsonl", "tensorboard", "wandb", "mlflow"))])


def test_plugins_table(defaults_only):
    result = run_rlloom("plugins", env=defaults_only)
    assert result.returncode == 0, result.stderr
    lines = result.stdout.splitlines()
    assert any(all(word in line for word in ("name", "kind", "distribution", "version", "status")) for line in lines)
    assert any(all(word in line for word in ("local", "launcher", "rlloom-trainer", "loaded")) for line in lines)
    assert any(all(word in line for word in ("smollm2-135m", "model", "rlloom-test-cli-defaults")) for line in lines)
    assert "presets: tiny (" in result.stdout


def test_print_config_composes_the_defaults(defaults_only):
    result = run_rlloom("train", "--print-config", "trainer.total_steps=3", env=defaults_only)
    assert result.returncode == 0, result.stderr
    lines = result.stdout.splitlines()
    assert "  total_steps: 3" in lines and "sampling:" in lines


def test_unknown_algorithm_is_a_usage_error_without_traceback(defaults_only):
    result = run_rlloom("train", "algorithm=nope", env=defaults_only)
    assert result.returncode == 2
    assert result.stderr == (
        "rlloom: error: algorithm=nope: no installed plugin provides algorithm 'nope'. Installed choices: grpo.\n")
    assert "Traceback" not in result.stderr and result.stdout == ""


def test_train_says_in_one_line_that_an_installed_plugin_failed(defaults_only, tmp_path):
    (tmp_path / "rlloom_test_cli_broken.py").write_text("import rlloom_no_such_dependency_xyz\n")
    info = tmp_path / "rlloom_test_cli_broken-0.1.0.dist-info"
    info.mkdir()
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: rlloom-test-cli-broken\nVersion: 0.1.0\n")
    (info / "entry_points.txt").write_text("[rlloom]\ncli_broken = rlloom_test_cli_broken\n")
    env = {"PYTHONPATH": f"{defaults_only['PYTHONPATH']}{os.pathsep}{tmp_path}",
           "RLLOOM_PLUGINS": "cli_defaults,cli_broken,trainer,agentkit"}
    result = run_rlloom("train", "--print-config", env=env)
    assert result.returncode == 0, result.stderr
    assert result.stderr == (
        "rlloom: warning: plugin rlloom-test-cli-broken (entry point 'cli_broken') failed to load and provides "
        "nothing: ModuleNotFoundError: No module named 'rlloom_no_such_dependency_xyz' (rlloom plugins shows "
        "every plugin)\n")
    unknown = run_rlloom("train", "algorithm=nope", env=env)
    assert unknown.returncode == 2 and "Installed plugins that failed to load (one may provide it): " \
        "rlloom-test-cli-broken (entry point 'cli_broken'): ModuleNotFoundError" in unknown.stderr


def test_misspelt_key_is_a_usage_error_naming_it(defaults_only):
    result = run_rlloom("train", "trainer.total_stepz=3", env=defaults_only)
    assert result.returncode == 2
    assert result.stderr.startswith("rlloom: error: trainer.total_stepz: no such key in trainer=default. "
                                    "Valid keys of trainer: total_steps, ")
    assert "Traceback" not in result.stderr


def test_uninstalled_launcher_says_what_to_install(defaults_only):
    result = run_rlloom("train", "launcher=ray", env=defaults_only)
    assert result.returncode == 2
    assert result.stderr.strip().endswith(f"pip install -e {CHECKOUT}/plugins/ray")
    assert "Traceback" not in result.stderr


def test_a_plugin_command_that_is_not_installed_says_what_to_install(defaults_only):
    result = run_rlloom("serve", "rollout=hf", env=defaults_only)
    assert result.returncode == 2
    assert result.stderr.strip().endswith(f"pip install -e {CHECKOUT}/backends/server")
    assert "Traceback" not in result.stderr


def test_train_without_the_trainer_plugin_says_what_to_install(defaults_only):
    result = run_rlloom("train", "preset=tiny", env={**defaults_only, "RLLOOM_PLUGINS": "cli_defaults"})
    assert result.returncode == 2
    assert result.stderr == ("rlloom: error: rlloom train comes with the rlloom-trainer distribution, which is not "
                             f"installed: pip install -e {CHECKOUT}/plugins/trainer\n")


def test_plugin_commands_are_listed_in_the_help_the_main_job_first():
    result = run_rlloom("--help")
    assert result.returncode == 0 and "serve" in result.stdout
    listed = result.stdout.split("{", 1)[1].split("}", 1)[0].split(",")
    assert listed[0] == "train"
    assert listed[1:] == sorted(listed[1:]) and {"eval", "plugins", "serve"} <= set(listed)


def test_importing_rlloom_pulls_no_heavy_backend():
    code = (
        "import json, sys\n"
        "import rlloom\n"
        "after_package = sorted({m.split('.')[0] for m in sys.modules})\n"
        "import rlloom_trainer.trainer, rlloom.cli\n"
        "print(json.dumps([after_package, sorted({m.split('.')[0] for m in sys.modules})]))\n"
    )
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr
    after_package, after_all = (set(names) for names in json.loads(result.stdout.splitlines()[-1]))
    heavy = {"ray", "vllm", "sglang", "megatron"}
    assert heavy & after_all == set()
    assert "transformers" not in after_package  # promised by rlloom/__init__.py
    assert {"rlloom", "torch"} <= after_all  # the check saw real imports


def test_an_engine_that_cannot_start_is_one_paragraph(tmp_path):
    """A real run (the installed plugins) whose rollout engine fails to build: exit 2, one line
    naming the role, the option and the cause; the traceback only with RLLOOM_DEBUG=1."""
    args = ("train", "preset=tiny", "rollout.attn_implementation=no_such_attention",
            f"trainer.run_dir={tmp_path / 'run'}")
    result = run_rlloom(*args)
    assert result.returncode == 2, result.stderr[-2000:]
    errors = [line for line in result.stderr.splitlines() if "error" in line.lower()]  # not progress bars
    assert len(errors) == 1 and "Traceback" not in result.stderr
    assert errors[0].startswith("rlloom: error: the rollout role (rollout=hf) could not start: ")
    assert "no_such_attention" in errors[0] and errors[0].endswith("(set RLLOOM_DEBUG=1 for the traceback)")
    debug = run_rlloom(*args, env={"RLLOOM_DEBUG": "1"})
    assert debug.returncode == 1 and "Traceback" in debug.stderr


def test_a_missing_model_folder_is_one_paragraph(tmp_path):
    result = run_rlloom("train", "preset=tiny", "model=hf", f"model.path={tmp_path / 'no_such_folder'}",
                        f"trainer.run_dir={tmp_path / 'run'}")
    assert result.returncode == 2, result.stderr[-2000:]
    assert result.stderr.startswith("rlloom: error: the model source (model=hf) could not start: ")
    assert "no_such_folder" in result.stderr
    assert "Traceback" not in result.stderr


def test_a_reader_that_went_away_ends_the_command_quietly():
    """``rlloom plugins --json | head``: the output pipe's reader is gone before the first write."""
    read_end, write_end = os.pipe()
    os.close(read_end)
    try:
        done = subprocess.run([str(RLLOOM), "plugins", "--json"], stdout=write_end, stderr=subprocess.PIPE, text=True)
    finally:
        os.close(write_end)
    assert done.returncode == 0 and done.stderr == "", done.stderr


def test_a_worker_that_cannot_start_names_its_error_in_the_paragraph():
    """A role whose worker raised while building (a launcher's RoleFailedError: first line, the
    remote traceback, the error last) is reported with the worker's first and last lines."""
    from rlloom.errors import RoleFailedError, RoleStartError

    failed = RoleFailedError("Ray worker for role 'actor' rank 1 raised during build():\nTraceback (most recent "
                             "call last):\n  File \"engine.py\", line 9\nValueError: train_engine.x=2 must divide 3")
    message = str(RoleStartError("actor", "train_engine=fsdp", failed))
    assert message == ("the actor role (train_engine=fsdp) could not start: RoleFailedError: Ray worker for role "
                       "'actor' rank 1 raised during build(): ValueError: train_engine.x=2 must divide 3 "
                       "(set RLLOOM_DEBUG=1 for the traceback)")
