"""The static-cache decoder (``rollout.decode=static``; ``graphs`` on CUDA) against the eager loop and
independent references, and its counter-based random streams. CUDA cases skip without a GPU."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest
import torch
from rlloom import SamplingParams
from rlloom_hf import HFRolloutConfig
from rlloom_hf.counter_rng import CounterStreams, mix
from rlloom_hf.static_decode import bucket_shape
from rlloom_trainer.testing import device_params
from test_hf_rollout import (  # the shared models, prompts and references
    PROMPTS,
    left_padded,
    make_engine,
    model_dirs,  # noqa: F401 - pytest fixture
    real_response,
    reference,  # noqa: F401 - pytest fixture
    teacher_forced,
)

NEEDS_CUDA = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU: CUDA-graph decoding")


def generate(engine, sampling, prompts=PROMPTS):
    return engine.generate(left_padded(prompts), sampling)


def assert_same_output(a, b, atol=1e-5):
    assert torch.equal(a["responses"], b["responses"]) and torch.equal(a["response_mask"], b["response_mask"])
    torch.testing.assert_close(a["rollout_log_probs"], b["rollout_log_probs"], atol=atol, rtol=0)


# ---------------------------------------------------------------------------------- counter streams
def splitmix64_reference(x: int) -> int:
    """SplitMix64's finaliser written with Python's unbounded integers."""
    mask = (1 << 64) - 1
    x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9 & mask
    x = (x ^ (x >> 27)) * 0x94D049BB133111EB & mask
    return x ^ (x >> 31)


def test_mix_is_splitmix64_on_unsigned_bit_patterns():
    values = [0, 1, 2**63 + 5, 12345678901234567, 2**64 - 1]
    signed = [v - 2**64 if v >= 2**63 else v for v in values]
    got = mix(torch.tensor(signed, dtype=torch.int64)).tolist()
    assert [g % 2**64 for g in got] == [splitmix64_reference(v) for v in values]


def test_counter_draws_are_uniform():
    """Chi-square over 20 equal bins of 40,000 draws (2,000 streams x 20 steps); fixed seed, so the
    statistic is a fixed number; the bound is the 99.9% quantile of chi-square with 19 dof."""
    streams = CounterStreams(7, torch.arange(2000) // 4, torch.arange(2000) % 4, torch.device("cpu"))
    draws = torch.cat([streams.uniform(torch.float64) for _ in range(20)]).numpy()
    assert draws.min() >= 0.0 and draws.max() < 1.0
    counts = np.histogram(draws, bins=20, range=(0.0, 1.0))[0]
    expected = len(draws) / 20
    assert ((counts - expected) ** 2 / expected).sum() < 43.82
    # neighbouring steps of one stream are not correlated
    steps = draws.reshape(20, 2000)
    assert abs(np.corrcoef(steps[:-1].ravel(), steps[1:].ravel())[0, 1]) < 0.02


def test_a_stream_depends_only_on_seed_prompt_copy_and_step():
    cpu = torch.device("cpu")
    together = CounterStreams(3, torch.tensor([0, 0, 1, 5]), torch.tensor([0, 1, 0, 2]), cpu)
    alone = CounterStreams(3, torch.tensor([5]), torch.tensor([2]), cpu)
    for _ in range(3):
        assert together.uniform(torch.float64)[3] == alone.uniform(torch.float64)[0]
    other_seed = CounterStreams(4, torch.tensor([5]), torch.tensor([2]), cpu)
    assert other_seed.uniform(torch.float64)[0] != CounterStreams(3, torch.tensor([5]), torch.tensor([2]),
                                                                  cpu).uniform(torch.float64)[0]


# ---------------------------------------------------------------------------------- the decoder
def test_bucket_shapes():
    assert bucket_shape(1, 10) == (1, 64)
    assert bucket_shape(5, 64) == (8, 64)
    assert bucket_shape(32, 65) == (32, 128)


def test_config_checks_the_decode_settings():
    for key, value in (("decode", "compiled"), ("eos_check_interval", 0), ("sleep_level", 3)):
        with pytest.raises(ValueError, match=key):
            HFRolloutConfig(**{key: value})
    with pytest.raises(ValueError, match=r"rollout.device='tpu'"):
        HFRolloutConfig(device="tpu")


def test_static_greedy_equals_the_eager_loop(model_dirs):
    sampling = SamplingParams(n=2, temperature=0.0, max_new_tokens=10)
    eager = generate(make_engine(model_dirs["main"]), sampling)
    static = generate(make_engine(model_dirs["main"], decode="static"), sampling)
    assert_same_output(static, eager)


@pytest.mark.parametrize("temperature", [1.0, 0.7])
def test_static_log_probs_match_teacher_forced_forward(model_dirs, reference, temperature):
    engine = make_engine(model_dirs["main"], decode="static", max_batch_rows=5)
    out = generate(engine, SamplingParams(n=3, temperature=temperature, max_new_tokens=10, seed=1))
    worst = 0.0
    for row in range(len(out)):
        response = real_response(out, row)
        expected = teacher_forced(reference, PROMPTS[row // 3], response, temperature)
        worst = max(worst, float((out["rollout_log_probs"][row, : len(response)].double() - expected).abs().max()))
    assert worst < 1e-3


def test_static_sampling_is_reproducible_and_independent_of_batching(model_dirs):
    sampling = SamplingParams(n=3, max_new_tokens=10, seed=21)
    whole = generate(make_engine(model_dirs["main"], decode="static"), sampling)
    again = generate(make_engine(model_dirs["main"], decode="static", max_batch_rows=5), sampling)
    assert_same_output(whole, again, atol=1e-4)
    tail = generate(make_engine(model_dirs["main"], decode="static", max_batch_rows=2),
                    dataclasses.replace(sampling, first_prompt=1), PROMPTS[1:])
    assert [real_response(tail, row) for row in range(len(tail))] == [
        real_response(whole, row) for row in range(3, len(whole))]
    different = generate(make_engine(model_dirs["main"], decode="static"), dataclasses.replace(sampling, seed=22))
    assert not torch.equal(different["responses"], whole["responses"])


def test_checking_for_eos_every_k_tokens_changes_nothing(model_dirs):
    sampling = SamplingParams(n=4, max_new_tokens=12, seed=5)
    every = generate(make_engine(model_dirs["main"], decode="static", eos_check_interval=1), sampling)
    rarely = generate(make_engine(model_dirs["main"], decode="static", eos_check_interval=8), sampling)
    assert_same_output(every, rarely)
    assert every["response_mask"].sum(dim=1).min() < 12  # some row did stop early


@pytest.mark.parametrize("decode", ["eager", "static"])
def test_ignore_eos_runs_every_response_to_max_new_tokens(model_dirs, decode):
    engine = make_engine(model_dirs["main"], decode=decode)
    stops = generate(engine, SamplingParams(n=4, max_new_tokens=12, seed=5))
    assert stops["response_mask"].sum(dim=1).min() < 12
    forced = generate(engine, SamplingParams(n=4, max_new_tokens=12, seed=5, ignore_eos=True))
    assert forced["response_mask"].shape == (len(PROMPTS) * 4, 12) and bool(forced["response_mask"].all())


def test_buckets_are_reused_across_calls_with_other_prompt_lengths(model_dirs):
    engine = make_engine(model_dirs["main"], decode="static")
    sampling = SamplingParams(temperature=0.0, max_new_tokens=6)
    first = generate(engine, sampling)
    short = generate(engine, sampling, [p[:1] for p in PROMPTS])  # same bucket, shorter prompts
    assert len(engine._static._buckets) == 1
    fresh = generate(make_engine(model_dirs["main"], decode="static"), sampling, [p[:1] for p in PROMPTS])
    assert_same_output(short, fresh)
    assert_same_output(generate(engine, sampling), first)


# ---------------------------------------------------------------------------------- CUDA
@NEEDS_CUDA
def test_cuda_graphs_equal_the_static_step_run_eagerly(model_dirs):
    sampling = SamplingParams(n=3, max_new_tokens=10, seed=2)
    graphs = make_engine(model_dirs["main"], device="cuda", dtype="float32", decode="graphs")
    eager_static = make_engine(model_dirs["main"], device="cuda", dtype="float32", decode="static")
    assert_same_output(generate(graphs, sampling), generate(eager_static, sampling), atol=1e-4)
    assert all(bucket.graph is not None for bucket in graphs._static._buckets.values())


@NEEDS_CUDA
def test_cuda_graphs_follow_weight_updates_and_sleep(model_dirs):
    sampling = SamplingParams(temperature=0.0, max_new_tokens=8)
    engine = make_engine(model_dirs["main"], device="cuda", decode="graphs", sleep_level=1)
    other = make_engine(model_dirs["other"], device="cuda", decode="graphs")
    before = generate(engine, sampling)
    engine.update_weights(other.model.state_dict().items())  # in place: the captured graph sees them
    assert_same_output(generate(engine, sampling), generate(other, sampling), atol=1e-3)
    engine.sleep()
    assert not engine._static._buckets  # level 1: caches and graphs freed
    engine.wake_up()
    engine.update_weights(make_engine(model_dirs["main"], device="cuda").model.state_dict().items())
    assert_same_output(generate(engine, sampling), before, atol=1e-3)


@pytest.mark.parametrize("device", device_params("bf16 graph decoding vs fp32 CPU log-probs"))
def test_bf16_on_the_device_against_fp32_teacher_forcing(model_dirs, reference, device):
    engine = make_engine(model_dirs["main"], device=device, dtype="bfloat16" if device == "cuda" else "float32")
    out = generate(engine, SamplingParams(n=2, max_new_tokens=8, seed=4))
    worst = max(
        float((out["rollout_log_probs"][row, : len(r)].double()
               - teacher_forced(reference, PROMPTS[row // 2], r, 1.0)).abs().max())
        for row in range(len(out)) if (r := real_response(out, row))
    )
    assert worst < (5e-2 if device == "cuda" else 1e-3)  # bf16: ~3 significant digits per logit
