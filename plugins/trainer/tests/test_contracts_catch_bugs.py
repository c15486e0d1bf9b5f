"""The contract kit (rlloom_trainer.contracts) fails engines and rewards with the bugs it exists to catch: each
mutant below wraps one of our own components with one bug, and exactly the contract test that owns that
property fails (the others pass). The mutants run in a pytest of their own, as a third party's suite would."""

from __future__ import annotations

import subprocess
import sys
import xml.etree.ElementTree as ElementTree

import pytest

MUTANTS = '''
import dataclasses

from rlloom import Batch
from rlloom_trainer.contracts import RewardContract, RolloutEngineContract, TrainEngineContract


class Wrapped:
    def __init__(self, inner):
        self.inner = inner

    def __getattr__(self, name):
        return getattr(self.inner, name)


class RolloutLogProbsOff(Wrapped):
    def generate(self, prompts, sampling):
        out = self.inner.generate(prompts, sampling)
        out["rollout_log_probs"] = out["rollout_log_probs"] * 1.01
        return out


class IgnoresFirstPrompt(Wrapped):
    def generate(self, prompts, sampling):
        return self.inner.generate(prompts, dataclasses.replace(sampling, first_prompt=0))


class AttendsToPadding(Wrapped):
    def generate(self, prompts, sampling):
        prompts["prompt_mask"] = prompts["prompt_mask"].clone().fill_(1)
        return self.inner.generate(prompts, sampling)


class TrainLogProbsOff(Wrapped):
    def compute_log_probs(self, batch, entropy=False):
        out = self.inner.compute_log_probs(batch, entropy)
        out["log_probs"] = out["log_probs"] * 1.01
        return out


class NoUpdate(Wrapped):
    def train_step(self, batch, loss_fn):
        return {}


class RaisesOnNone(Wrapped):
    def __call__(self, batch):
        if any(truth is None for truth in batch["ground_truth"]):
            raise TypeError("ground truth is None")
        return self.inner(batch)


def mutant(contract, plugin, wrapper):
    """The engine contract ``contract`` on our plugin ``plugin`` (entry point and name), its engine wrapped."""
    class Mutant(contract):
        entry_point = name = plugin

        @classmethod
        def build(cls, registry, model_path):
            return wrapper(super().build(registry, model_path))
    return Mutant


class TestRaisesOnNone(RewardContract):
    entry_point, name, rows = "tasks", "arithmetic", [("8", "8")]

    @classmethod
    def build(cls, registry):
        return RaisesOnNone(super().build(registry))


TestRolloutLogProbsOff = mutant(RolloutEngineContract, "hf", RolloutLogProbsOff)
TestIgnoresFirstPrompt = mutant(RolloutEngineContract, "hf", IgnoresFirstPrompt)
TestAttendsToPadding = mutant(RolloutEngineContract, "hf", AttendsToPadding)
TestTrainLogProbsOff = mutant(TrainEngineContract, "fsdp", TrainLogProbsOff)
TestNoUpdate = mutant(TrainEngineContract, "fsdp", NoUpdate)
'''

EXPECTED_FAILURES = {
    "TestRolloutLogProbsOff": {"test_log_probs_are_a_plain_forwards_at_the_sampled_tokens"},
    "TestIgnoresFirstPrompt": {"test_the_seed_contract"},
    "TestAttendsToPadding": {"test_a_left_padded_prompt_gets_the_response_it_gets_alone"},
    "TestTrainLogProbsOff": {"test_log_probs_equal_a_plain_forward"},
    "TestNoUpdate": {"test_a_train_step_changes_the_weights"},
    "TestRaisesOnNone": {"test_rows_a_verifier_chokes_on_are_scored_not_raised"},
}


@pytest.mark.slow
def test_each_mutant_fails_exactly_the_contract_test_that_owns_its_bug(tmp_path):
    (tmp_path / "test_mutants.py").write_text(MUTANTS)
    report = tmp_path / "report.xml"
    subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-k", "not no_torch",
                    f"--junitxml={report}", "test_mutants.py"], cwd=tmp_path, capture_output=True, text=True,
                   timeout=600)
    failed: dict[str, set[str]] = {}
    ran: dict[str, int] = {}
    for case in ElementTree.parse(report).getroot().iter("testcase"):
        cls = case.get("classname").rsplit(".", 1)[-1]
        ran[cls] = ran.get(cls, 0) + 1
        if case.find("failure") is not None or case.find("error") is not None:
            failed.setdefault(cls, set()).add(case.get("name"))
    assert failed == EXPECTED_FAILURES
    assert set(ran) == set(EXPECTED_FAILURES) and all(count >= 2 for count in ran.values()), ran
