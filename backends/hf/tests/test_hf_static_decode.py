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
from rlloom_hf.engine import decode_mode
from rlloom_hf.static_decode import StaticDecoder, bucket_shape
from rlloom_trainer.testing import device_params
from test_hf_rollout import (  # the shared models, prompts and references
    PROMPTS,
    left_padded,
    make_engine,
    model_dirs,  # noqa: F401 - pytest fixture
    real_response,
    reference,  # noqa: F401 - pytest fixture
    save_model,
    teacher_forced,
)
from transformers import AutoModelForCausalLM, Llama4TextConfig, MistralConfig, Qwen2Config

NEEDS_CUDA = pytest.mark.cuda("CUDA-graph decoding")


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
    for key, value in (("decode", "compiled"), ("eos_check_interval", 0), ("sleep_level", 3), ("max_buckets", 0)):
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


def test_buckets_beyond_max_buckets_are_dropped_least_recently_used_first(model_dirs):
    engine = make_engine(model_dirs["main"], decode="static", max_buckets=2)
    greedy = SamplingParams(temperature=0.0, max_new_tokens=6)
    calls = {  # bucket shape -> sampling, prompts
        (4, 64): (greedy, PROMPTS),
        (4, 128): (dataclasses.replace(greedy, max_new_tokens=70), PROMPTS),
        (16, 64): (dataclasses.replace(greedy, n=3), PROMPTS),
        (1, 64): (greedy, PROMPTS[:1]),
    }
    first = {shape: generate(engine, sampling, prompts) for shape, (sampling, prompts) in calls.items()}
    assert list(engine._static._buckets) == [(16, 64), (1, 64)]  # the oldest two were dropped
    again = generate(engine, greedy)  # (4, 64) built again, (16, 64) dropped
    assert list(engine._static._buckets) == [(1, 64), (4, 64)]
    assert_same_output(again, first[(4, 64)])
    fresh = make_engine(model_dirs["main"], decode="static")
    for shape, (sampling, prompts) in calls.items():
        assert_same_output(first[shape], generate(fresh, sampling, prompts))


# ---------------------------------------------------------------------------------- sliding windows
WINDOW = 4  # shorter than the longest prompt (7 tokens) plus the responses
SLIDING_MODELS = {  # name: (config type, settings with the window, settings without)
    "qwen2-mixed": (Qwen2Config, dict(use_sliding_window=True, sliding_window=WINDOW, max_window_layers=1),
                    dict(use_sliding_window=False)),  # layer 0 full, layer 1 sliding: a dict of masks
    "mistral": (MistralConfig, dict(sliding_window=WINDOW), dict(sliding_window=None)),  # one sliding mask
}


@pytest.fixture(scope="session")
def sliding_dirs(tmp_path_factory) -> dict[str, tuple[str, str]]:
    """Per :data:`SLIDING_MODELS` entry, two tiny models with the same weights: with the window, without."""
    root = tmp_path_factory.mktemp("hf_sliding_models")
    dirs = {}
    for name, (config_type, windowed, unwindowed) in SLIDING_MODELS.items():
        dirs[name] = (str(root / name), str(root / f"{name}-full"))
        save_model(root / name, 3, False, config_type, **windowed)
        save_model(root / f"{name}-full", 3, False, config_type, **unwindowed)
    return dirs


SLIDING_CASES = [pytest.param(name, "static", "cpu", id=f"{name}-static-cpu") for name in SLIDING_MODELS] + [
    pytest.param(name, "graphs", "cuda", id=f"{name}-graphs-cuda",
                 marks=pytest.mark.cuda("CUDA-graph decoding of sliding-window models")) for name in SLIDING_MODELS]


@pytest.mark.parametrize(("name", "decode", "device"), SLIDING_CASES)
def test_sliding_window_models_decode_static_like_eager(sliding_dirs, name, decode, device):
    """The static loop with the window in its masks samples what the eager loop (transformers' own
    sliding caches and masks) samples, and its log-probs are those of an unpadded teacher-forced
    forward of the windowed model; the window does change the responses (same weights, no window)."""
    windowed, unwindowed = sliding_dirs[name]
    sampling = SamplingParams(n=2, temperature=0.0, max_new_tokens=12, ignore_eos=True)
    static = generate(make_engine(windowed, device=device, dtype="float32", decode=decode), sampling)
    assert_same_output(static, generate(make_engine(windowed, device=device, dtype="float32", decode="eager"),
                                        sampling), atol=1e-4)
    full = generate(make_engine(unwindowed, device=device, dtype="float32", decode=decode), sampling)
    assert not torch.equal(static["responses"], full["responses"])
    reference = AutoModelForCausalLM.from_pretrained(windowed, dtype=torch.float32, attn_implementation="eager").eval()
    worst = max(float((static["rollout_log_probs"][row].double()
                       - teacher_forced(reference, PROMPTS[row // 2], real_response(static, row), 1.0)).abs().max())
                for row in range(len(static)))
    assert worst < 1e-3


def test_models_the_static_decoder_cannot_run_decode_eagerly_or_are_refused():
    chunked = Llama4TextConfig(num_hidden_layers=2)  # chunked-attention layers
    cuda = torch.device("cuda", 0)
    assert decode_mode("auto", cuda, chunked) == "eager"
    assert decode_mode("auto", cuda, Qwen2Config(num_hidden_layers=2)) == "graphs"
    assert decode_mode("auto", torch.device("cpu"), Qwen2Config(num_hidden_layers=2)) == "eager"
    for decode in ("static", "graphs"):
        with pytest.raises(ValueError, match=rf"rollout.decode='{decode}'.*chunked_attention.*'eager'"):
            decode_mode(decode, cuda, chunked)


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


@NEEDS_CUDA
def test_cuda_graph_replays_equal_the_static_steps_run_eagerly(model_dirs):
    """Step by step, a captured bucket's replays give the logits the same step gives uncaptured,
    and those change from step to step (an empty graph would leave the warm-up's logits)."""
    model = make_engine(model_dirs["main"], device="cuda", dtype="float32", decode="eager").model
    prompts = left_padded(PROMPTS)
    ids, mask = prompts["prompts"].cuda(), prompts["prompt_mask"].cuda()
    captured, plain = (StaticDecoder(model, model.device, graphs=graphs, eos_check_interval=1, max_buckets=1)
                       for graphs in (True, False))
    steps = []
    for decoder in (captured, plain):
        bucket, _ = decoder._bucket(len(PROMPTS), ids.shape[1] + 6)
        logits = bucket.prefill(ids, mask)
        if decoder.graphs:
            bucket.write_at.fill_(ids.shape[1])
            decoder._capture(bucket)
        position = mask.sum(dim=1, keepdim=True)
        steps.append([])
        for step in range(6):
            logits = bucket.step(logits.argmax(dim=-1), ids.shape[1] + step, position + step).clone()
            steps[-1].append(logits)
    assert captured._buckets[(4, 64)].graph is not None and plain._buckets[(4, 64)].graph is None
    for graph_logits, plain_logits in zip(*steps):
        torch.testing.assert_close(graph_logits, plain_logits, atol=1e-4, rtol=0)
    assert all(not torch.allclose(a, b) for a, b in zip(steps[0], steps[0][1:]))


@NEEDS_CUDA
def test_cuda_graphs_survive_bucket_eviction_with_one_shared_pool(model_dirs):
    """Buckets captured into one memory pool, one of them dropped and captured again, still replay
    what the uncaptured static step computes."""
    sampling = SamplingParams(n=2, max_new_tokens=10, seed=6)
    calls = [(sampling, PROMPTS), (dataclasses.replace(sampling, n=4), PROMPTS), (sampling, PROMPTS[:1]),
             (sampling, PROMPTS), (sampling, PROMPTS[:1])]
    # shapes (8, 64), (16, 64), (2, 64); (8, 64) again: dropped, recaptured; (2, 64) replayed after that
    graphs = make_engine(model_dirs["main"], device="cuda", dtype="float32", decode="graphs", max_buckets=2)
    plain = make_engine(model_dirs["main"], device="cuda", dtype="float32", decode="static")
    for sampling_, prompts in calls:
        assert_same_output(generate(graphs, sampling_, prompts), generate(plain, sampling_, prompts), atol=1e-4)
    assert list(graphs._static._buckets) == [(8, 64), (2, 64)]
    assert all(bucket.graph is not None for bucket in graphs._static._buckets.values())


@pytest.mark.cuda("CUDA graphs on a GPU that is not the current one (rollout.device=cuda:1)", gpus=2)
@pytest.mark.parametrize(("model_gpu", "current_gpu"), [(1, 0), (0, 1)])
def test_cuda_graphs_on_a_gpu_that_is_not_the_current_one(model_dirs, model_gpu, current_gpu):
    sampling = SamplingParams(n=3, max_new_tokens=10, seed=2)
    device = f"cuda:{model_gpu}"
    with torch.cuda.device(current_gpu):
        graphs = generate(make_engine(model_dirs["main"], device=device, dtype="float32", decode="graphs"), sampling)
        plain = generate(make_engine(model_dirs["main"], device=device, dtype="float32", decode="static"), sampling)
        assert torch.cuda.current_device() == current_gpu
    assert_same_output(graphs, plain, atol=1e-4)


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
