"""Dispatch of engine methods over 2-process Ray pools: an FSDP2 actor (gloo) and an HF rollout."""

from __future__ import annotations

import os

import pytest
import torch

os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")
ray = pytest.importorskip("ray")

from rlloom import Batch, EngineSpec, SamplingParams  # noqa: E402
from rlloom.types import RoleSpec  # noqa: E402
from rlloom.plugins.registry import get_registry  # noqa: E402
from rlloom_fsdp.config import FSDPConfig  # noqa: E402
from rlloom_models.config import TinyModelConfig  # noqa: E402
from rlloom_ray import RayLauncher, RayLauncherConfig, WorkerError  # noqa: E402

PROMPT, RESPONSE = 6, 5


@pytest.fixture(scope="module")
def model_path(cache):
    return get_registry().build("model", "tiny", TinyModelConfig(cache_dir=cache))


@pytest.fixture(scope="module")
def actor(ray_cluster, model_path):
    launcher = RayLauncher(RayLauncherConfig(resource_pools={"global": 2}, call_timeout_s=120))
    spec = RoleSpec("actor", "train_engine", "fsdp", FSDPConfig(), EngineSpec(model_path, "actor", 0, 1))
    yield launcher.start_role(spec, get_registry())
    launcher.shutdown()


def make_batch(rows: int, vocab: int) -> Batch:
    generator = torch.Generator().manual_seed(rows)
    mask = torch.ones(rows, RESPONSE, dtype=torch.int64)
    mask[0, 3:] = 0  # a shorter response, right-padded
    return Batch({
        "prompts": torch.randint(0, vocab, (rows, PROMPT), generator=generator),
        "prompt_mask": torch.ones(rows, PROMPT, dtype=torch.int64),
        "responses": torch.randint(0, vocab, (rows, RESPONSE), generator=generator),
        "response_mask": mask,
    }, batch_size=rows)


def hf_log_probs(model_path: str, batch: Batch) -> torch.Tensor:
    """log softmax(logits) of each response token, straight from the HF model (0 where masked)."""
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(model_path, dtype=torch.float32).eval()
    ids = torch.cat([batch["prompts"], batch["responses"]], dim=1)
    with torch.no_grad():
        logits = model(ids).logits[:, PROMPT - 1:-1]
    picked = torch.log_softmax(logits, dim=-1).gather(2, batch["responses"].unsqueeze(2)).squeeze(2)
    return picked * batch["response_mask"]


def test_log_probs_split_over_two_ranks_keep_row_order(actor, model_path):
    from transformers import AutoConfig

    batch = make_batch(5, AutoConfig.from_pretrained(model_path).vocab_size)  # 5 rows, padded to 3 + 3
    out = actor.compute_log_probs(batch)
    assert len(out) == 5
    torch.testing.assert_close(out["log_probs"], hf_log_probs(model_path, batch), atol=1e-5, rtol=1e-5)


def test_named_weights_come_from_rank_zero_in_full(actor, model_path):
    from transformers import AutoModelForCausalLM

    expected = AutoModelForCausalLM.from_pretrained(model_path, dtype=torch.float32).state_dict()
    weights = dict(actor.named_weights())
    assert weights.keys() <= expected.keys() and len(weights) >= len(expected) - 1  # tied lm_head left out
    for name, tensor in weights.items():
        assert torch.equal(tensor, expected[name]), name


def test_one_row_is_padded_for_log_probs_and_refused_for_a_train_step(actor, model_path):
    from transformers import AutoConfig

    batch = make_batch(1, AutoConfig.from_pretrained(model_path).vocab_size)
    out = actor.compute_log_probs(batch)  # dp_split: rank 1 computes a copy of the row, dropped after
    assert len(out) == 1
    torch.testing.assert_close(out["log_probs"], hf_log_probs(model_path, batch), atol=1e-5, rtol=1e-5)
    with pytest.raises(ValueError, match=r"actor.train_step on Ray pool 'global': a batch of 1 rows cannot feed "
                                         r"2 ranks without padding"):
        actor.train_step(batch, None)  # dp_split_uneven: refused before any rank runs


def test_handle_has_exactly_the_engines_methods(actor):
    assert callable(actor.train_step)
    assert getattr(actor, "load_weights_from_dir", None) is None
    with pytest.raises(AttributeError, match="the actor role .* has no method 'generate'"):
        actor.generate


def test_generation_is_split_over_a_rollout_pool_of_two(ray_cluster, model_path, monkeypatch):
    from rlloom_enginekit.stream_calls import GENERATE_STREAM
    from rlloom_hf import HFRolloutConfig, HFRolloutEngine

    monkeypatch.setenv("RLLOOM_RAY_FAULT", "rollout:stream_groups:2:raise:1")  # rank 1's second streamed job
    launcher = RayLauncher(RayLauncherConfig(resource_pools={"gen": 2}, mapping={"rollout": "gen"},
                                             call_timeout_s=120))
    try:
        rollout = launcher.start_role(RoleSpec("rollout", "rollout", "hf", HFRolloutConfig(),
                                               EngineSpec(model_path, "rollout")), get_registry())
        prompts = Batch({"prompts": torch.tensor([[5, 6, 7], [8, 9, 10], [11, 12, 13]]),
                         "prompt_mask": torch.ones(3, 3, dtype=torch.int64)}, batch_size=3)
        sampling = SamplingParams(n=2, max_new_tokens=4, seed=11)
        out = rollout.generate(prompts, sampling)  # rank 0: prompts 0-1, rank 1: prompt 2
        # Each response draws from (seed, prompt index in the call, response index): the split call
        # samples exactly what one engine does with the whole call.
        whole = HFRolloutEngine(HFRolloutConfig(), EngineSpec(model_path, "rollout")).generate(prompts, sampling)
        assert len(out) == 6
        width = out["responses"].shape[1]
        assert width == whole["responses"].shape[1]
        for name in ("responses", "response_mask"):
            assert torch.equal(out[name], whole[name]), name
        torch.testing.assert_close(out["rollout_log_probs"], whole["rollout_log_probs"], atol=1e-5, rtol=0)
        # Streamed (trainer.stream_groups): split alike, each rank's groups merged as they come, the same
        # responses; rank 1's second job raises, named.
        rollout.submit_call(GENERATE_STREAM, (prompts, sampling), {})
        groups = []
        while len(groups) < 3:
            groups += rollout.streamed(wait=True)
        for group in groups:
            row = [i for i in range(3) if torch.equal(group["prompts"][0], prompts["prompts"][i])]
            expected = whole.reorder([2 * row[0], 2 * row[0] + 1])
            assert sampled(group) == sampled(expected)
        assert sorted(group["prompts"][0, 0].item() for group in groups) == [5, 8, 11]
        rollout.submit_call(GENERATE_STREAM, (prompts, sampling), {})
        with pytest.raises(WorkerError, match=r"role 'rollout' rank 1 raised during stream_groups\(\)"):
            while True:
                rollout.streamed(wait=True)
    finally:
        launcher.shutdown()


def sampled(batch: Batch) -> list[list[int]]:
    """Each row's sampled response tokens."""
    return [row[mask.bool()].tolist() for row, mask in zip(batch["responses"], batch["response_mask"])]
