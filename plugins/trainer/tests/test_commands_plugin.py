"""The commands are registered by rlloom-trainer with the help lines they always had; without the
distribution, each one says which distribution to install (exit status 2)."""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
from pathlib import Path

import pytest

CHECKOUT = Path(__file__).resolve().parents[3]  # our distributions install from its folders (not on PyPI yet)
from rlloom.cli import build_parser
from rlloom.plugins.registry import get_registry

RLLOOM = Path(sys.executable).parent / "rlloom"
HELP = {
    "train": "run training",
    "chat": "chat with a checkpoint or model (one stdin line per turn)",
    "eval": "validation metrics of a checkpoint or model, without training",
    "export": "write a checkpoint's policy as a Hugging Face folder",
    "generate": "sample responses (text, token ids, log-probs) from a checkpoint or model",
    "plot": "write PNG charts of runs' metrics",
}


def test_each_command_comes_from_this_distribution_with_its_help_line():
    commands = get_registry().components["command"]
    assert {name: commands[name].distribution for name in HELP} == dict.fromkeys(HELP, "rlloom-trainer")
    (sub,) = [action for action in build_parser()._actions if isinstance(action, argparse._SubParsersAction)]
    assert {choice.dest: choice.help for choice in sub._choices_actions if choice.dest in HELP} == HELP


@pytest.mark.parametrize("name", sorted(HELP))
def test_without_the_distribution_a_command_says_what_to_install(name):
    env = {**os.environ, "RLLOOM_PLUGINS": ""}  # only the core's built-ins load
    result = subprocess.run([str(RLLOOM), name, "runs/x"], env=env, capture_output=True, text=True, timeout=120)
    assert (result.returncode, result.stderr) == (
        2, f"rlloom: error: rlloom {name} comes with the rlloom-trainer distribution, which is not installed: "
        f"pip install -e {CHECKOUT}/plugins/trainer\n")


def test_the_table_says_in_one_line_what_each_component_is():
    from rlloom_trainer.commands.plugins import DESCRIPTION_CHARS, plugin_rows

    what = {(row["kind"], row["name"]): row["what"] for row in plugin_rows()}
    assert what["train_engine", "fsdp"] == "The FSDP2 train engine"  # the summary's first clause
    assert what["reward", "arithmetic"] == "is the last integer of the response the ground-truth integer?"
    assert what["rollout", "sglang"].endswith("…") and len(what["rollout", "sglang"]) == DESCRIPTION_CHARS
    assert not [text for text in what.values() if "``" in text or ":class:" in text or len(text) > DESCRIPTION_CHARS]
