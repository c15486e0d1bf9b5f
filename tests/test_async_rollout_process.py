"""The rollout role in a process of its own (``rlloom_trainer.rollout_process``, how ``launcher=local`` places
it in an async mode): it generates what the in-process engine generates, and its failures reach the trainer
as errors naming what happened."""

from __future__ import annotations

import os
import signal

import pytest
import torch
from rlloom.types import EngineSpec, RoleSpec, SamplingParams
from rlloom_hf import HFRolloutConfig, HFRolloutEngine
from rlloom_trainer.rollout_process import RolloutProcess


def spec(model_path: str) -> RoleSpec:
    return RoleSpec("rollout", "rollout", "hf", HFRolloutConfig(), EngineSpec(model_path, "rollout", seed=3))


def prompts():
    from rlloom.batch import Batch

    ids = torch.tensor([[65, 66, 67], [258, 68, 69]])
    return Batch({"prompts": ids, "prompt_mask": (ids != 258).long()})


def test_the_process_generates_what_the_engine_generates_in_process(tiny_model_path):
    sampling = SamplingParams(max_new_tokens=5, n=2, seed=11)
    apart = RolloutProcess(spec(tiny_model_path), threads=1)
    try:
        future = apart.submit_call("generate", (prompts(), sampling), {})
        theirs = future.result()
        start, end = future.span()
    finally:
        apart.close()
    ours = HFRolloutEngine(HFRolloutConfig(), EngineSpec(tiny_model_path, "rollout", seed=3)).generate(prompts(), sampling)
    assert torch.equal(theirs["responses"], ours["responses"]) and start <= end
    assert torch.equal(theirs["rollout_log_probs"], ours["rollout_log_probs"])


def test_a_weight_update_takes_effect_after_the_generation_submitted_before_it(tiny_model_path):
    sampling = SamplingParams(max_new_tokens=5, n=1, seed=11, temperature=0.0)
    engine = HFRolloutEngine(HFRolloutConfig(), EngineSpec(tiny_model_path, "rollout", seed=3))
    zeroed = [(name, torch.zeros_like(tensor)) for name, tensor in engine.model.named_parameters()]
    apart = RolloutProcess(spec(tiny_model_path), threads=1)
    try:
        before = apart.submit_call("generate", (prompts(), sampling), {})
        apart.update_weights(zeroed)
        after = apart.generate(prompts(), sampling)
        assert torch.equal(before.result()["responses"], engine.generate(prompts(), sampling)["responses"])
        assert not torch.equal(after["responses"], before.result()["responses"])  # the zero model's argmax
    finally:
        apart.close()


def test_an_engine_that_fails_to_build_raises_its_error_in_the_trainer(tmp_path):
    with pytest.raises(Exception, match="no-model"):
        RolloutProcess(spec(str(tmp_path / "no-model")), threads=1)


def test_a_killed_rollout_process_is_named_not_waited_for(tiny_model_path):
    apart = RolloutProcess(spec(tiny_model_path), threads=1)
    os.kill(apart._process.pid, signal.SIGKILL)
    with pytest.raises(RuntimeError, match=r"the rollout process exited \(code -9\)"):
        apart.generate(prompts(), SamplingParams(max_new_tokens=2))
    apart.close()
