"""The plugin template, installed the way a stranger's package would be: built by pip into a folder
on ``PYTHONPATH`` and discovered by the ``rlloom`` command through its entry point alone.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from omegaconf import OmegaConf

from rlloom import Batch, MiniBatchStats

REPO = Path(__file__).resolve().parents[1]
TEMPLATE = REPO / "plugins" / "template"
RLLOOM = Path(sys.executable).parent / "rlloom"


@pytest.fixture(scope="module")
def installed_template(tmp_path_factory) -> Path:
    """``pip install --no-deps --target`` of a copy of the template (the build writes into its source)."""
    source = tmp_path_factory.mktemp("template_src") / "template"
    shutil.copytree(TEMPLATE, source, ignore=shutil.ignore_patterns("build", "*.egg-info", "__pycache__"))
    target = tmp_path_factory.mktemp("template_target")
    subprocess.run(
        [sys.executable, "-m", "pip", "install", "--quiet", "--no-deps", "--no-build-isolation",
         "--target", str(target), "-c", str(REPO / ".ci" / "constraints.txt"), str(source)],
        check=True, capture_output=True, text=True, timeout=300,
    )
    assert (target / "rlloom_plugin_template-0.1.0.dist-info").is_dir()
    return target


def run_rlloom(*args: str, pythonpath: Path) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if k != "RLLOOM_PLUGINS"}
    env["PYTHONPATH"] = str(pythonpath)
    return subprocess.run([str(RLLOOM), *args], env=env, capture_output=True, text=True, timeout=120)


def test_the_templates_entry_point_imports_no_torch(installed_template):
    """Every command loads every plugin's entry point: the template's must stay as cheap as ours."""
    code = "import sys, rlloom_plugin_template.plugin; print('torch' in sys.modules)"
    done = subprocess.run([sys.executable, "-c", code], env={**os.environ, "PYTHONPATH": str(installed_template)},
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 0 and done.stdout.strip() == "False", done.stderr


def test_installed_template_is_listed(installed_template):
    result = run_rlloom("plugins", "--json", pythonpath=installed_template)
    assert result.returncode == 0, result.stderr
    rows = [r for r in json.loads(result.stdout) if r["distribution"] == "rlloom-plugin-template"]
    assert sorted((r["name"], r["kind"], r["version"], r["status"]) for r in rows) == [
        ("toy_length", "reward", "0.1.0", "loaded"),
        ("toy_reinforce", "algorithm", "0.1.0", "loaded"),
    ]


def test_installed_template_options_compose(installed_template):
    result = run_rlloom("train", "algorithm=toy_reinforce", "reward=toy_length", "reward.max_chars=5",
                        "--print-config", pythonpath=installed_template)
    assert result.returncode == 0, result.stderr
    cfg = OmegaConf.create(result.stdout)
    assert OmegaConf.to_container(cfg.algorithm) == {"n": 4}  # ToyReinforceConfig: toy_reinforce was selected
    assert OmegaConf.to_container(cfg.reward) == {"max_chars": 5}  # ToyLengthRewardConfig, overridden
    # the run records which third-party options it chose, and where they came from
    assert (cfg.choices.algorithm, cfg.choices.reward) == ("toy_reinforce", "toy_length")
    for group in ("algorithm", "reward"):
        assert OmegaConf.to_container(cfg.provenance.plugins[group]) == {
            "distribution": "rlloom-plugin-template", "version": "0.1.0"}


@pytest.fixture
def template_src(monkeypatch):
    """The template's source importable in this process (its modules are forgotten afterwards)."""
    monkeypatch.syspath_prepend(str(TEMPLATE / "src"))
    yield
    for name in [m for m in sys.modules if m.split(".")[0] == "rlloom_plugin_template"]:
        del sys.modules[name]


def test_toy_length_reward_on_a_hand_built_batch(template_src):
    from rlloom_plugin_template.config import ToyLengthRewardConfig
    from rlloom_plugin_template.reward import ToyLengthReward

    batch = Batch(objects={"response_text": ["abc", "  ab \n", "abcd", "", " a b c "]})
    result = ToyLengthReward(ToyLengthRewardConfig(max_chars=3))(batch)
    # stripped lengths 3, 2, 4, 0, 5 against max_chars 3
    assert torch.equal(result.scores, torch.tensor([1.0, 1.0, 0.0, 1.0, 0.0]))
    assert result.scores.dtype == torch.float32
    assert torch.equal(result.components["short"], torch.tensor([1.0, 1.0, 0.0, 1.0, 0.0]))
    longer = ToyLengthReward(ToyLengthRewardConfig(max_chars=5))(batch)
    assert longer.scores.tolist() == [1.0, 1.0, 1.0, 1.0, 1.0]


def test_toy_reinforce_loss_by_hand(template_src):
    from rlloom_plugin_template.algorithm import reinforce_loss

    micro = Batch({
        "advantages": torch.tensor([[1.0, 1.0], [-2.0, 0.0]]),
        "response_mask": torch.tensor([[1, 1], [1, 0]]),
    })
    log_probs = torch.tensor([[-0.5, -1.0], [-2.0, -9.0]], requires_grad=True)
    # tokens counted: (1, -0.5), (1, -1.0), (-2, -2.0); the masked (0, -9.0) drops out
    # loss = -(-0.5 - 1.0 + 4.0) / 3 tokens
    loss, metrics = reinforce_loss(micro, {"log_probs": log_probs}, MiniBatchStats(3, 2, 2, 2))
    assert loss.item() == pytest.approx(-2.5 / 3)
    assert metrics == {"pg_loss": pytest.approx(-2.5 / 3)}
    loss.backward()
    assert torch.allclose(log_probs.grad, torch.tensor([[-1 / 3, -1 / 3], [2 / 3, 0.0]]))


@pytest.mark.slow
def test_the_installed_template_passes_its_contract_tests(installed_template, tmp_path):
    """The template's own suite, run as its author would (the plugin installed, pytest in its folder)."""
    env = {**{k: v for k, v in os.environ.items() if k != "RLLOOM_PLUGINS"}, "PYTHONPATH": str(installed_template)}
    done = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", str(TEMPLATE / "tests"),
                           f"--rootdir={tmp_path}"], cwd=tmp_path, env=env,
                          capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stdout[-3000:]
    assert "7 passed" in done.stdout, done.stdout[-1000:]  # 3 for the algorithm, 4 for the reward
