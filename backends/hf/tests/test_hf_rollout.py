"""Tests of the ``hf`` rollout engine on tiny random Qwen2 models saved to a temporary folder.

References are computed here independently of the engine: a separately loaded copy of the model
with eager attention, run without KV cache and without padding on each prompt + response.
"""

from __future__ import annotations

import dataclasses
import math
from pathlib import Path

import pytest
import torch
from rlloom import Batch, EngineSpec, SamplingParams
from rlloom.plugins.registry import Registry
from rlloom.protocols import RolloutEngine
from tokenizers import Regex, Tokenizer, decoders, models, pre_tokenizers
from transformers import AutoModelForCausalLM, PreTrainedTokenizerFast, Qwen2Config

from rlloom_hf import HFRolloutConfig, HFRolloutEngine
from rlloom_hf.sampling import filter_top_k_top_p, sample_categorical
from rlloom_trainer.testing import device_params

SPECIALS = ["<pad>", "<eos>", "<end>", "<unk>"]
PAD, EOS, END = 0, 1, 2  # <eos> is the tokenizer's eos; the generation config stops on <eos> and <end>
VOCAB = SPECIALS + list("0123456789+-=? abcd")

torch.set_num_threads(1)


def save_model(path: Path, seed: int, tie: bool, config_type=Qwen2Config, **config) -> None:
    """A tiny random causal LM of ``config_type`` (extra ``config`` settings) and the tokenizer of
    :data:`VOCAB`; one seed and shape give the same weights whatever else the config says."""
    torch.manual_seed(seed)
    config = config_type(
        vocab_size=len(VOCAB), hidden_size=64, intermediate_size=128, num_hidden_layers=2,
        num_attention_heads=4, num_key_value_heads=2, initializer_range=0.15,
        tie_word_embeddings=tie, eos_token_id=[EOS, END], pad_token_id=PAD, **config,
    )
    AutoModelForCausalLM.from_config(config).save_pretrained(path)
    tokenizer = Tokenizer(models.WordLevel({t: i for i, t in enumerate(VOCAB)}, unk_token="<unk>"))
    tokenizer.pre_tokenizer = pre_tokenizers.Split(Regex("."), behavior="isolated")
    tokenizer.decoder = decoders.Fuse()
    PreTrainedTokenizerFast(
        tokenizer_object=tokenizer, pad_token="<pad>", eos_token="<eos>", unk_token="<unk>"
    ).save_pretrained(path)


@pytest.fixture(scope="session")
def model_dirs(tmp_path_factory) -> dict[str, str]:
    """Three tiny models: ``main`` and ``other`` (untied, different weights), ``tied``."""
    root = tmp_path_factory.mktemp("hf_rollout_models")
    dirs = {}
    for name, seed, tie in (("main", 0, False), ("other", 1, False), ("tied", 2, True)):
        dirs[name] = str(root / name)
        save_model(root / name, seed, tie)
    return dirs


def make_engine(path: str, seed: int = 0, **cfg) -> HFRolloutEngine:
    return HFRolloutEngine(HFRolloutConfig(**cfg), EngineSpec(model_path=path, role="rollout", seed=seed))


@pytest.fixture(scope="session")
def reference(model_dirs):
    """An independent copy of the ``main`` model (eager attention) for teacher-forced references."""
    return AutoModelForCausalLM.from_pretrained(model_dirs["main"], dtype=torch.float32,
                                                attn_implementation="eager").eval()


def left_padded(rows: list[list[int]], **extra) -> Batch:
    """A prompt batch from token lists of different lengths, left-padded with PAD."""
    width = max(map(len, rows))
    ids = torch.full((len(rows), width), PAD, dtype=torch.long)
    mask = torch.zeros((len(rows), width), dtype=torch.long)
    for i, row in enumerate(rows):
        ids[i, width - len(row):] = torch.tensor(row)
        mask[i, width - len(row):] = 1
    return Batch({"prompts": ids, "prompt_mask": mask}, extra.pop("objects", None), batch_size=len(rows), **extra)


PROMPTS = [[5, 6, 7], [8, 9, 10, 11, 12, 13, 14], [15], [16, 17, 18, 19, 20]]


def real_prompt(out: Batch, row: int) -> list[int]:
    return out["prompts"][row][out["prompt_mask"][row].bool()].tolist()


def real_response(out: Batch, row: int) -> list[int]:
    return out["responses"][row][out["response_mask"][row].bool()].tolist()


@torch.no_grad()
def teacher_forced(model, prompt: list[int], response: list[int], temperature: float) -> torch.Tensor:
    """log softmax(logits / T) of each response token, from one unpadded forward over prompt + response."""
    ids = torch.tensor([prompt + response])
    logits = model(input_ids=ids).logits[0, len(prompt) - 1 : len(prompt) + len(response) - 1]
    log_probs = torch.log_softmax(logits.double() / temperature, dim=-1)
    return log_probs[torch.arange(len(response)), torch.tensor(response)]


@torch.no_grad()
def next_token_probs(model, prefix: list[int], temperature: float) -> torch.Tensor:
    return torch.softmax(model(input_ids=torch.tensor([prefix])).logits[0, -1].double() / temperature, dim=-1)


# ---------------------------------------------------------------------------------- plugin
def test_registered_as_rollout_engine_hf(model_dirs):
    component = Registry().get("rollout", "hf")
    assert component.config is HFRolloutConfig
    assert component.distribution == "rlloom-hf"
    engine = component.factory(HFRolloutConfig(), EngineSpec(model_path=model_dirs["main"], role="rollout"))
    assert isinstance(engine, RolloutEngine)
    assert engine.tokenizer.decode([VOCAB.index(c) for c in "12+3=?"]) == "12+3=?"
    assert engine.stop_ids == [EOS, END]
    assert engine.pad_id == PAD


def test_config_rejects_bad_values():
    with pytest.raises(ValueError, match="dtype"):
        HFRolloutConfig(dtype="float64")
    with pytest.raises(ValueError, match="max_batch_rows"):
        HFRolloutConfig(max_batch_rows=0)


# ---------------------------------------------------------------------------------- layout
def test_output_layout_and_padding(model_dirs):
    engine = make_engine(model_dirs["main"])
    prompts = left_padded(PROMPTS, meta={"step": 3})
    out = engine.generate(prompts, SamplingParams(n=2, temperature=1.0, max_new_tokens=12, seed=0))
    rows = len(PROMPTS) * 2
    R = out["responses"].shape[1]
    assert 1 <= R <= 12
    assert out["responses"].dtype == torch.long and out["response_mask"].dtype == torch.long
    assert out["rollout_log_probs"].dtype == torch.float32
    assert not out["rollout_log_probs"].requires_grad  # decoding builds no autograd graph (it runs under no_grad)
    for name in ("responses", "response_mask", "rollout_log_probs"):
        assert out[name].shape == (rows, R)
    assert out["prompts"].shape == (rows, prompts["prompts"].shape[1])
    mask = out["response_mask"]
    lengths = mask.sum(1)
    # right padding: 1…1 0…0 in every row, and R is the longest response
    assert torch.equal(mask, (torch.arange(R) < lengths[:, None]).long())
    assert int(lengths.max()) == R
    assert torch.all(out["responses"][mask == 0] == PAD)
    assert torch.all(out["rollout_log_probs"][mask == 0] == 0)
    assert torch.all(out["rollout_log_probs"][mask == 1] < 0)
    # a response ends at its first stop token, or runs to max_new_tokens
    for row in range(rows):
        response = real_response(out, row)
        stops = [i for i, t in enumerate(response) if t in (EOS, END)]
        assert stops == [] and len(response) == 12 or stops == [len(response) - 1]
    assert out.meta == {"step": 3, "temperature": 1.0, "pad_token_id": PAD}


def test_empty_batch_gives_empty_responses(model_dirs):
    engine = make_engine(model_dirs["main"])
    nothing = torch.zeros((0, 3), dtype=torch.long)
    empty = Batch({"prompts": nothing, "prompt_mask": nothing})
    out = engine.generate(empty, SamplingParams(n=2))
    assert len(out) == 0
    assert out["responses"].shape == (0, 0) and out["rollout_log_probs"].dtype == torch.float32


def test_rejects_prompts_not_left_padded(model_dirs):
    engine = make_engine(model_dirs["main"])
    ids = torch.tensor([[5, 6, 0], [7, 8, 9]])
    with pytest.raises(ValueError, match=r"row\(s\) \[0\]"):
        engine.generate(Batch({"prompts": ids, "prompt_mask": (ids != 0).long()}), SamplingParams())
    with pytest.raises(ValueError, match="prompt_mask"):
        engine.generate(Batch({"prompts": ids}), SamplingParams())


# ---------------------------------------------------------------------------------- log-probs
@pytest.mark.parametrize("temperature", [1.0, 0.7])
def test_log_probs_match_teacher_forced_forward(model_dirs, reference, temperature):
    # 4 prompts x n=3 in chunks of 5 rows: chunks split prompt groups, each group shares a prefill
    engine = make_engine(model_dirs["main"], max_batch_rows=5)
    sampling = SamplingParams(n=3, temperature=temperature, max_new_tokens=10, seed=1)
    out = engine.generate(left_padded(PROMPTS), sampling)
    assert out.meta["temperature"] == temperature
    worst = 0.0
    for row in range(len(out)):
        assert real_prompt(out, row) == PROMPTS[row // 3]
        response = real_response(out, row)
        expected = teacher_forced(reference, PROMPTS[row // 3], response, temperature)
        got = out["rollout_log_probs"][row, : len(response)].double()
        worst = max(worst, float((got - expected).abs().max()))
    assert worst < 1e-3


def test_left_padding_gives_the_same_results_as_each_prompt_alone(model_dirs):
    engine = make_engine(model_dirs["main"])
    sampling = SamplingParams(temperature=0.0, max_new_tokens=10)
    together = engine.generate(left_padded(PROMPTS), sampling)
    for i, prompt in enumerate(PROMPTS):
        alone = engine.generate(left_padded([prompt]), sampling)
        assert real_response(together, i) == real_response(alone, 0)
        length = len(real_response(alone, 0))
        torch.testing.assert_close(together["rollout_log_probs"][i, :length], alone["rollout_log_probs"][0, :length],
                                   atol=1e-4, rtol=0)


def test_greedy_is_the_argmax_continuation(model_dirs, reference):
    engine = make_engine(model_dirs["main"])
    out = engine.generate(left_padded(PROMPTS), SamplingParams(temperature=0.0, max_new_tokens=8))
    assert out.meta["temperature"] == 1.0
    for i, prompt in enumerate(PROMPTS):
        sequence, expected_log_probs = list(prompt), []
        while len(sequence) - len(prompt) < 8:
            probs = next_token_probs(reference, sequence, 1.0)
            token = int(probs.argmax())
            sequence.append(token)
            expected_log_probs.append(math.log(float(probs[token])))
            if token in (EOS, END):
                break
        expected = sequence[len(prompt):]
        assert real_response(out, i) == expected
        torch.testing.assert_close(out["rollout_log_probs"][i, : len(expected)].double(),
                                   torch.tensor(expected_log_probs, dtype=torch.float64), atol=1e-4, rtol=0)


def test_chunk_size_does_not_change_results(model_dirs):
    sampling = SamplingParams(n=2, temperature=0.0, max_new_tokens=8)
    whole = make_engine(model_dirs["main"]).generate(left_padded(PROMPTS), sampling)
    one_by_one = make_engine(model_dirs["main"], max_batch_rows=1).generate(left_padded(PROMPTS), sampling)
    assert torch.equal(whole["response_mask"], one_by_one["response_mask"])
    assert torch.equal(whole["responses"], one_by_one["responses"])
    torch.testing.assert_close(whole["rollout_log_probs"], one_by_one["rollout_log_probs"], atol=1e-4, rtol=0)


# ---------------------------------------------------------------------------------- stopping
def test_sampled_responses_stop_at_either_stop_token(model_dirs):
    # All-zero lm_head: every next token is uniform over the vocabulary, log-prob -log V exactly,
    # and each step stops with probability 2/V, so rows end at many different lengths.
    engine = make_engine(model_dirs["main"])
    engine.update_weights([("lm_head.weight", torch.zeros(len(VOCAB), 64))])
    out = engine.generate(left_padded(PROMPTS), SamplingParams(n=6, temperature=0.7, max_new_tokens=20, seed=3))
    lengths = out["response_mask"].sum(1)
    last_tokens = {real_response(out, row)[-1] for row in range(len(out))}
    assert {EOS, END} <= last_tokens  # both stop ids were hit (precondition of the checks below)
    assert int(lengths.min()) < int(lengths.max())
    for row in range(len(out)):
        response = real_response(out, row)
        n = len(response)
        assert all(t not in (EOS, END) for t in response[:-1])
        assert response[-1] in (EOS, END) or n == 20
        assert out["response_mask"][row, :n].eq(1).all() and out["response_mask"][row, n:].eq(0).all()
        assert out["responses"][row, n:].eq(PAD).all()
    masked = out["rollout_log_probs"][out["response_mask"] == 1]
    torch.testing.assert_close(masked, torch.full_like(masked, -math.log(len(VOCAB))), atol=1e-5, rtol=0)
    assert out["rollout_log_probs"][out["response_mask"] == 0].eq(0).all()


def test_rows_that_stopped_leave_the_model_calls(model_dirs):
    """Each decode call computes only the rows still running: call k (after the prefill) draws
    token k, so it holds exactly the rows whose response has a token k."""
    engine = make_engine(model_dirs["main"])
    engine.update_weights([("lm_head.weight", torch.zeros(len(VOCAB), 64))])  # stops at many lengths
    call_rows = []
    hook = engine.model.register_forward_pre_hook(
        lambda _module, _args, kwargs: call_rows.append(len(kwargs["input_ids"])), with_kwargs=True)
    out = engine.generate(left_padded(PROMPTS), SamplingParams(n=6, temperature=0.7, max_new_tokens=20, seed=3))
    hook.remove()
    running = out["response_mask"].sum(0).tolist()  # rows with a token at each step
    assert call_rows[0] == len(PROMPTS)  # the prefill: each distinct prompt once
    assert call_rows[1:] == running[1:]
    assert running[1] > running[-1]  # precondition: rows did stop along the way


@pytest.mark.parametrize("stop_id", [EOS, END])
def test_greedy_stops_right_after_a_forced_stop_token(model_dirs, stop_id):
    # Hidden dimension 0 is made ~1000 for every token, so after the final RMSNorm it is positive
    # and dominates; an lm_head reading only that dimension, only for ``stop_id``, makes it the argmax.
    engine = make_engine(model_dirs["main"])
    embed = engine.model.get_input_embeddings().weight.detach().clone()
    embed[:, 0] = 1000.0
    head = torch.zeros(len(VOCAB), 64)
    head[stop_id, 0] = 1.0
    engine.update_weights([("model.embed_tokens.weight", embed), ("lm_head.weight", head)])
    out = engine.generate(left_padded(PROMPTS), SamplingParams(n=2, temperature=0.0, max_new_tokens=8))
    assert torch.equal(out["responses"], torch.full((8, 1), stop_id))
    assert torch.equal(out["response_mask"], torch.ones((8, 1), dtype=torch.long))


@pytest.mark.parametrize("mode", ["eager", "static"])
def test_a_calls_stop_token_ids_end_its_responses_even_with_ignore_eos(model_dirs, mode):
    engine = make_engine(model_dirs["main"], decode=mode)
    greedy = SamplingParams(n=1, temperature=0.0, max_new_tokens=8, ignore_eos=True)
    full = engine.generate(left_padded(PROMPTS), greedy)
    stop = int(full["responses"][0, 2])  # the 3rd greedy token of row 0
    cut = engine.generate(left_padded(PROMPTS), dataclasses.replace(greedy, stop_token_ids=(stop,)))
    for row in range(len(full)):
        tokens = real_response(full, row)
        assert real_response(cut, row) == tokens[: tokens.index(stop) + 1 if stop in tokens else len(tokens)]
    assert len(real_response(cut, 0)) <= 3


# ---------------------------------------------------------------------------------- sampling
def test_seed_makes_generation_reproducible(model_dirs):
    engine = make_engine(model_dirs["main"])
    prompts = left_padded(PROMPTS)
    first = engine.generate(prompts, SamplingParams(n=4, max_new_tokens=12, seed=7))
    again = engine.generate(prompts, SamplingParams(n=4, max_new_tokens=12, seed=7))
    other = engine.generate(prompts, SamplingParams(n=4, max_new_tokens=12, seed=8))
    for name in ("responses", "response_mask", "rollout_log_probs"):
        assert torch.equal(first[name], again[name])
    assert not torch.equal(first["responses"], other["responses"])
    # without a call seed, draws come from the engine's generator seeded with spec.seed
    unseeded = SamplingParams(n=4, max_new_tokens=12)
    a, b = make_engine(model_dirs["main"], seed=5), make_engine(model_dirs["main"], seed=5)
    a_first, b_first = a.generate(prompts, unseeded), b.generate(prompts, unseeded)
    assert torch.equal(a_first["responses"], b_first["responses"])
    assert not torch.equal(a.generate(prompts, unseeded)["responses"], a_first["responses"])


def test_a_response_samples_the_same_whatever_else_is_in_the_call(model_dirs):
    # Each response draws from (seed, prompt index in the whole call, response index): a call split
    # into pieces (each told where its prompts start) or decoded in other chunk sizes samples the same.
    engine = make_engine(model_dirs["main"])
    sampling = SamplingParams(n=3, max_new_tokens=10, seed=21)
    whole = engine.generate(left_padded(PROMPTS), sampling)
    head = make_engine(model_dirs["main"], max_batch_rows=2).generate(left_padded(PROMPTS[:1]), sampling)
    tail = make_engine(model_dirs["main"], max_batch_rows=5).generate(
        left_padded(PROMPTS[1:]), dataclasses.replace(sampling, first_prompt=1))
    responses = [real_response(part, row) for part in (head, tail) for row in range(len(part))]
    assert responses == [real_response(whole, row) for row in range(len(whole))]
    for part, rows in ((head, slice(0, 3)), (tail, slice(3, None))):
        width = part["rollout_log_probs"].shape[1]
        torch.testing.assert_close(part["rollout_log_probs"], whole["rollout_log_probs"][rows, :width], atol=1e-4, rtol=0)
    shifted = engine.generate(left_padded(PROMPTS[1:]), sampling)  # prompt 1 counted as prompt 0: other draws
    assert not torch.equal(shifted["responses"][:3], tail["responses"][:3])


def test_n_responses_are_interleaved_with_their_prompt_fields(model_dirs):
    engine = make_engine(model_dirs["main"], max_batch_rows=4)
    uids = ["p0", "p1", "p2", "p3"]
    prompts = left_padded(PROMPTS, objects={"uid": uids})
    prompts["index"] = torch.arange(4) * 10
    out = engine.generate(prompts, SamplingParams(n=3, temperature=1.0, max_new_tokens=12, seed=2))
    assert len(out) == 12
    for row in range(12):
        i = row // 3
        assert out["uid"][row] == uids[i]
        assert int(out["index"][row]) == 10 * i
        assert torch.equal(out["prompts"][row], prompts["prompts"][i])
        assert torch.equal(out["prompt_mask"][row], prompts["prompt_mask"][i])
    groups = [{tuple(real_response(out, 3 * i + j)) for j in range(3)} for i in range(4)]
    assert all(len(group) > 1 for group in groups)  # the n samples of a prompt are drawn independently


@pytest.mark.parametrize("top_k, top_p", [(3, 1.0), (-1, 0.6), (4, 0.8)])
def test_top_k_top_p_restrict_samples_but_not_reported_log_probs(model_dirs, reference, top_k, top_p):
    engine = make_engine(model_dirs["main"])
    sampling = SamplingParams(n=4, temperature=1.3, top_k=top_k, top_p=top_p, max_new_tokens=10, seed=4)
    out = engine.generate(left_padded(PROMPTS), sampling)
    for row in range(len(out)):
        prompt, response = PROMPTS[row // 4], real_response(out, row)
        for step, token in enumerate(response):
            probs = next_token_probs(reference, prompt + response[:step], 1.3)
            higher = probs > probs[token] * (1 + 1e-6)
            if top_k != -1:
                assert int(higher.sum()) < top_k
            if top_p < 1.0:
                # renormalised over the top-k set when top-k applies
                kept = probs.clone()
                if top_k != -1:
                    kept[probs < torch.topk(probs, top_k).values[-1]] = 0
                kept /= kept.sum()
                assert float(kept[higher].sum()) < top_p + 1e-6
        expected = teacher_forced(reference, prompt, response, 1.3)
        assert float((out["rollout_log_probs"][row, : len(response)].double() - expected).abs().max()) < 1e-3


def test_filter_top_k_top_p_by_hand():
    logits = torch.log(torch.tensor([[0.1, 0.4, 0.2, 0.3]]))
    inf = float("-inf")
    assert torch.equal(torch.isinf(filter_top_k_top_p(logits, 2, 1.0)), torch.tensor([[True, False, True, False]]))
    # nucleus 0.5: 0.4 alone is below 0.5, 0.4 + 0.3 reaches it -> keep {1, 3}
    assert torch.equal(torch.isinf(filter_top_k_top_p(logits, -1, 0.5)), torch.tensor([[True, False, True, False]]))
    # nucleus 0.35 is reached by the first token alone
    assert torch.equal(torch.isinf(filter_top_k_top_p(logits, -1, 0.35)), torch.tensor([[True, False, True, True]]))
    # top-k 3 leaves {0.4, 0.3, 0.2}/0.9; nucleus 0.75 needs 0.4/0.9 + 0.3/0.9 = 0.78 -> keep {1, 3}
    out = filter_top_k_top_p(logits, 3, 0.75)
    assert torch.equal(out == inf, torch.tensor([[True, False, True, False]]))
    assert torch.equal(filter_top_k_top_p(logits, -1, 1.0), logits)


def test_sample_categorical_follows_the_distribution():
    probs = torch.tensor([0.0, 0.5, 0.0, 0.3, 0.2, 0.0]).repeat(40000, 1)
    probs[::2] *= 3.0  # rows need not be normalised
    draws = sample_categorical(probs, torch.rand(len(probs), generator=torch.Generator().manual_seed(0)))
    counts = torch.bincount(draws, minlength=6).double() / len(draws)
    assert counts[[0, 2, 5]].eq(0).all()
    # binomial standard error at 40000 draws is <= 0.0025; allow 4 of them
    torch.testing.assert_close(counts, torch.tensor([0.0, 0.5, 0.0, 0.3, 0.2, 0.0], dtype=torch.float64),
                               atol=0.01, rtol=0)


# ---------------------------------------------------------------------------------- weights
def test_update_weights_loads_another_models_weights(model_dirs):
    engine, other = make_engine(model_dirs["main"]), make_engine(model_dirs["other"])
    sampling = SamplingParams(temperature=0.0, max_new_tokens=8)
    prompts = left_padded(PROMPTS)
    before, target = engine.generate(prompts, sampling), other.generate(prompts, sampling)
    assert not torch.equal(before["rollout_log_probs"], target["rollout_log_probs"])
    engine.update_weights((name, tensor.clone()) for name, tensor in other.model.state_dict().items())
    after = engine.generate(prompts, sampling)
    assert torch.equal(after["responses"], target["responses"])
    torch.testing.assert_close(after["rollout_log_probs"], target["rollout_log_probs"], atol=1e-6, rtol=0)


def test_update_weights_keeps_tied_embeddings_tied(model_dirs):
    engine = make_engine(model_dirs["tied"])
    new = torch.randn(len(VOCAB), 64)
    engine.update_weights([("lm_head.weight", new)])
    assert torch.equal(engine.model.get_input_embeddings().weight, new)
    newer = torch.randn(len(VOCAB), 64)
    engine.update_weights([("model.embed_tokens.weight", newer)])
    assert torch.equal(engine.model.get_output_embeddings().weight, newer)
    # the logits use the shared matrix: last hidden state @ newer.T
    ids = torch.tensor([[5, 6, 7]])
    with torch.no_grad():
        hidden = engine.model.model(input_ids=ids).last_hidden_state
        torch.testing.assert_close(engine.model(input_ids=ids).logits, hidden @ newer.T)


def test_update_weights_rejects_unknown_names_and_wrong_shapes(model_dirs):
    engine = make_engine(model_dirs["main"])
    with pytest.raises(ValueError, match="model.layers.9.mlp.up_proj.weight"):
        engine.update_weights([("model.layers.9.mlp.up_proj.weight", torch.zeros(128, 64))])
    with pytest.raises(ValueError, match=r"'model.norm.weight' has shape \(65,\)"):
        engine.update_weights([("model.norm.weight", torch.zeros(65))])
    assert engine.model.model.norm.weight.ne(0).all()  # the rejected tensor was not copied


# ---------------------------------------------------------------------------------- float32 head
@torch.no_grad()
def head_outputs(model, ids: list[int]) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Of one unpadded forward over ``ids``, [len(ids), V] each: the model's own logits (what the
    rollout's head returns), h W^T in float64 on its final hidden states h (the trainer's float32
    head up to the order of float32 sums), and h W^T as a plain head in the model's dtype returns it."""
    out = model(input_ids=torch.tensor([ids], device=model.device), output_hidden_states=True)
    hidden, head = out.hidden_states[-1][0], model.get_output_embeddings()
    return out.logits[0], hidden.double() @ head.weight.double().t(), torch.nn.Linear.forward(head, hidden)


@pytest.mark.parametrize("device", device_params("bf16 LM head with float32 output (torch.mm out_dtype)"))
def test_the_lm_head_returns_float32_logits_without_rounding_to_bf16(model_dirs, device):
    engine = make_engine(model_dirs["main"], device=device, dtype="bfloat16")
    logits, exact, rounded = head_outputs(engine.model, PROMPTS[1])
    assert logits.dtype == torch.float32 and rounded.dtype == torch.bfloat16
    error = float((logits.double() - exact).abs().max())
    assert error < 1e-5 * float(exact.abs().max())  # float32 sums of exact bf16 products
    assert float((rounded.double() - exact).abs().max()) > 30 * error


def test_bf16_rollout_log_probs_equal_the_fp32_head_of_the_same_hidden_states(model_dirs):
    """First tokens of each prompt alone (the prefill is the same unpadded forward as the reference):
    the rollout's log-prob is log softmax of the float64 head on the bf16 hidden states to float32
    precision, where log-probs of bf16 logits are ~1e-3 off."""
    engine = make_engine(model_dirs["main"], dtype="bfloat16", max_batch_rows=1)
    out = engine.generate(left_padded(PROMPTS), SamplingParams(n=4, max_new_tokens=1, seed=3))
    ours, of_bf16_logits = [], []
    for row in range(len(out)):
        _, exact, rounded = head_outputs(engine.model, PROMPTS[row // 4])
        token = int(out["responses"][row, 0])
        reference = float(torch.log_softmax(exact[-1], dim=-1)[token])
        ours.append(abs(float(out["rollout_log_probs"][row, 0]) - reference))
        of_bf16_logits.append(abs(float(torch.log_softmax(rounded[-1].double(), dim=-1)[token]) - reference))
    assert max(ours) < 1e-5
    assert max(of_bf16_logits) > 1e-4 and max(of_bf16_logits) > 100 * max(ours)


# ---------------------------------------------------------------------------------- devices
@pytest.mark.parametrize("device", device_params("a plain `cuda` rollout device is the LOCAL_RANK GPU"))
def test_a_plain_cuda_device_is_the_gpu_of_local_rank(model_dirs, monkeypatch, device):
    expected = torch.device("cpu") if device == "cpu" else torch.device("cuda", torch.cuda.device_count() - 1)
    monkeypatch.setenv("LOCAL_RANK", "1" if device == "cpu" else str(expected.index))
    engine = make_engine(model_dirs["main"], device=device)
    assert engine.device == expected
    assert next(engine.model.parameters()).device == expected


# ---------------------------------------------------------------------------------- lifecycle
def test_sleep_wake_up_and_close(model_dirs):
    engine = make_engine(model_dirs["main"])
    prompts, sampling = left_padded(PROMPTS), SamplingParams(temperature=0.0, max_new_tokens=4)
    before = engine.generate(prompts, sampling)
    engine.sleep()
    with pytest.raises(RuntimeError, match="asleep"):
        engine.generate(prompts, sampling)
    engine.wake_up()
    assert torch.equal(engine.generate(prompts, sampling)["responses"], before["responses"])
    engine.close()
    with pytest.raises(RuntimeError, match="closed"):
        engine.generate(prompts, sampling)
    assert engine.tokenizer.decode([VOCAB.index(c) for c in "ab"]) == "ab"


# ------------------------------------------------------------------------------ per-request API
def _random_prompts(count: int, seed: int) -> list[list[int]]:
    generator = torch.Generator().manual_seed(seed)
    lengths = torch.randint(1, 9, (count,), generator=generator).tolist()
    return [torch.randint(5, len(VOCAB), (length,), generator=generator).tolist() for length in lengths]


def test_prompt_index_field_keys_rows_like_first_prompt(model_dirs):
    """A row with prompt_index k samples what the row of a call with first_prompt=k samples."""
    engine = make_engine(model_dirs["main"])
    sampling = SamplingParams(n=2, temperature=1.0, max_new_tokens=6, seed=11)
    together = engine.generate(_indexed([PROMPTS[0], PROMPTS[1]], [7, 3]), sampling)
    alone_7 = engine.generate(left_padded([PROMPTS[0]]), dataclasses.replace(sampling, first_prompt=7))
    alone_3 = engine.generate(left_padded([PROMPTS[1]]), dataclasses.replace(sampling, first_prompt=3))
    for rows, alone in ((slice(0, 2), alone_7), (slice(2, 4), alone_3)):
        length = alone["responses"].shape[1]
        assert torch.equal(together["responses"][rows, :length], alone["responses"])
    assert not torch.equal(alone_7["responses"], engine.generate(left_padded([PROMPTS[0]]), sampling)["responses"])


def _indexed(rows: list[list[int]], indices: list[int]) -> Batch:
    batch = left_padded(rows)
    batch["prompt_index"] = torch.tensor(indices)
    return batch


def test_concurrent_requests_match_one_batch_call(model_dirs):
    """64 single-prompt requests in flight at once give the tokens and log-probs of one batch call
    with the same seed, and are served by a few batched generate calls, not 64."""
    import asyncio

    engine = make_engine(model_dirs["main"])
    prompts = _random_prompts(64, seed=3)
    sampling = SamplingParams(n=2, temperature=1.0, max_new_tokens=8, seed=5)
    batch = engine.generate(left_padded(prompts), sampling)

    async def requests():
        return await asyncio.gather(*(engine.generate_one(ids, dataclasses.replace(sampling, first_prompt=i))
                                      for i, ids in enumerate(prompts)))

    answers = asyncio.run(requests())
    lengths = batch["response_mask"].sum(1).tolist()
    for i, answer in enumerate(answers):
        for j in range(2):
            row = 2 * i + j
            assert answer.token_ids[j] == batch["responses"][row, : lengths[row]].tolist()
            torch.testing.assert_close(torch.tensor(answer.log_probs[j]),
                                       batch["rollout_log_probs"][row, : lengths[row]], atol=1e-5, rtol=0)
            assert answer.finish_reasons[j] == ("length" if lengths[row] == 8 else "stop")
    assert engine._scheduler.generate_calls <= 64 // engine.config.max_batch_rows + 2
    engine.close()


def test_cancelled_request_is_withdrawn_and_errors_reach_every_request(model_dirs):
    import asyncio

    engine = make_engine(model_dirs["main"])
    sampling = SamplingParams(n=1, temperature=1.0, max_new_tokens=4, seed=1)

    async def cancel_one():
        kept = asyncio.ensure_future(engine.generate_one(PROMPTS[0], sampling))
        dropped = asyncio.ensure_future(engine.generate_one(PROMPTS[1], sampling))
        await asyncio.sleep(0)  # both queued, the worker still gathering
        dropped.cancel()
        answer = await kept
        with pytest.raises(asyncio.CancelledError):
            await dropped
        return answer

    answer = asyncio.run(cancel_one())
    assert len(answer.token_ids) == 1 and 1 <= len(answer.token_ids[0]) <= 4
    engine.sleep()

    async def while_asleep():
        return await asyncio.gather(*(engine.generate_one(ids, sampling) for ids in PROMPTS), return_exceptions=True)

    errors = asyncio.run(while_asleep())
    assert all(isinstance(e, RuntimeError) and "asleep" in str(e) for e in errors)
    engine.close()


def test_a_request_the_engine_cannot_take_fails_alone_and_the_worker_goes_on(model_dirs):
    """Ids outside the vocabulary (an IndexError in the embedding) and an id no int64 holds (the
    batch cannot even be built) batched with good requests: the scheduler reruns the failed call
    one request at a time, so only the bad requests fail, the good ones get what they get alone,
    and a later request is served."""
    import asyncio

    engine = make_engine(model_dirs["main"])
    sampling = SamplingParams(n=1, temperature=1.0, max_new_tokens=4, seed=3)
    alone = [asyncio.run(engine.generate_one(ids, dataclasses.replace(sampling, first_prompt=i)))
             for i, ids in enumerate(PROMPTS)]

    async def mixed():
        bad = [engine.generate_one([5, len(VOCAB) + 7], sampling), engine.generate_one([5, 2**70], sampling)]
        good = [engine.generate_one(ids, dataclasses.replace(sampling, first_prompt=i)) for i, ids in enumerate(PROMPTS)]
        return await asyncio.gather(*bad, *good, return_exceptions=True)

    answers = asyncio.run(mixed())
    assert isinstance(answers[0], IndexError) and "Overflow" in str(answers[1]), answers[:2]
    assert [a.token_ids for a in answers[2:]] == [a.token_ids for a in alone]
    assert asyncio.run(engine.generate_one(PROMPTS[0], sampling)).token_ids == alone[0].token_ids
    engine.close()


def test_response_buffers_grow_with_the_response_not_max_new_tokens():
    """A chunk asking for 10^12 new tokens holds FIRST_WIDTH columns until a step needs more, then
    twice as many (sized by M up front, these buffers would need 20 TB)."""
    from rlloom_hf.decode import FIRST_WIDTH, ResponseSlots, grown

    slots = ResponseSlots(rows=2, max_new=10**12, pad_id=PAD, device=torch.device("cpu"))
    stop = torch.tensor([EOS])
    for step in range(FIRST_WIDTH + 1):
        slots.record(step, torch.tensor([7, 8]), torch.tensor([-0.5, -0.25]), stop)
    assert slots.tokens.shape == slots.mask.shape == slots.log_probs.shape == (2, 2 * FIRST_WIDTH)
    chunk = slots.chunk(FIRST_WIDTH + 1)
    assert chunk.tokens.eq(torch.tensor([[7], [8]])).all() and chunk.mask.eq(1).all()
    assert torch.equal(grown(torch.ones(1, 3), needed=5, limit=5, fill=0), torch.tensor([[1.0, 1, 1, 0, 0]]))
    assert ResponseSlots(rows=1, max_new=5, pad_id=PAD, device=torch.device("cpu")).tokens.shape == (1, 5)


def test_the_growing_kv_layer_writes_each_token_in_place_and_holds_what_concatenation_holds():
    """Fed a 3-column prefill and then one column at a time, a GrowingLayer returns the keys and values
    transformers' concatenating DynamicLayer returns, at every step and after selecting rows; between two
    doublings (4 -> 6 columns here) a token is written into the same buffer, not a new copy of the cache; after
    transformers' own cache edits (crop, repeat, select) the next token still lands where DynamicLayer puts it."""
    from rlloom_hf.decode import GrowingLayer
    from transformers.cache_utils import DynamicLayer

    torch.manual_seed(0)
    growing, plain = GrowingLayer(), DynamicLayer()
    buffers = []
    for step, width in enumerate((3, 1, 1, 1, 1, 1, 1)):
        piece = torch.randn(3 if step <= 3 else 2, 2, width, 4)
        keys, values = growing.update(piece, -piece)
        expected_keys, expected_values = plain.update(piece, -piece)
        assert torch.equal(keys, expected_keys) and torch.equal(values, expected_values)
        assert growing.get_seq_length() == keys.shape[2] == 3 + step
        buffers.append(growing.key_buffer.data_ptr())
        if step == 3:
            growing.reorder_cache(torch.tensor([2, 0]))
            plain.batch_select_indices(torch.tensor([2, 0]))
            assert torch.equal(growing.keys, plain.keys) and torch.equal(growing.values, plain.values)
            buffers.append(growing.key_buffer.data_ptr())
    assert buffers[5] == buffers[6] == buffers[7] and growing.key_buffer.shape[2] == 12
    edits = (("crop", -2), ("batch_repeat_interleave", 2), ("batch_select_indices", torch.tensor([3, 0])))
    for edit, argument in edits:
        for layer in (growing, plain):
            getattr(layer, edit)(argument)
        piece = torch.randn(plain.keys.shape[0], 2, 1, 4)
        keys, values = growing.update(piece, -piece)
        expected_keys, expected_values = plain.update(piece, -piece)
        assert torch.equal(keys, expected_keys) and torch.equal(values, expected_values), edit
        assert growing.get_seq_length() == plain.get_seq_length()


@pytest.mark.parametrize("decode", ["eager", "static"])
def test_response_index_and_budget_fields_give_a_row_its_responses_and_its_own_budget(model_dirs, decode):
    """A call of n=1 rows, the same prompt three times (prompt index 0) with response indices 0, 1, 2 (the eager
    loop prefills it once), samples what a call with n=3 samples; each row with its own budget (3, 8, 5
    tokens, ignore_eos) stops there."""
    from rlloom.batch import PROMPT_INDEX_FIELD
    from rlloom_enginekit.prompts import MAX_TOKENS_FIELD, RESPONSE_INDEX_FIELD

    engine = make_engine(model_dirs["main"], decode=decode)
    sampling = SamplingParams(n=3, temperature=1.0, max_new_tokens=8, seed=6, ignore_eos=True)
    full = engine.generate(left_padded([PROMPTS[1]]), sampling)
    rows = left_padded([PROMPTS[1]] * 3)
    rows[RESPONSE_INDEX_FIELD] = torch.tensor([0, 1, 2])
    rows[MAX_TOKENS_FIELD] = torch.tensor([3, 8, 5])
    rows[PROMPT_INDEX_FIELD] = torch.zeros(3, dtype=torch.long)
    prefills = []
    hook = engine.model.register_forward_hook(lambda _module, args, kwargs, _out: prefills.append(
        tuple(kwargs["input_ids"].shape)), with_kwargs=True)
    out = engine.generate(rows, dataclasses.replace(sampling, n=1))
    hook.remove()
    assert decode == "static" or prefills[0] == (1, len(PROMPTS[1]))  # the eager loop: one prompt row prefilled
    assert out["response_mask"].sum(dim=1).tolist() == [3, 8, 5]
    for row, budget in enumerate((3, 8, 5)):
        assert real_response(out, row) == real_response(full, row)[:budget]


@pytest.mark.parametrize("decode", ["eager", "static"])
def test_responses_longer_than_the_first_buffers_match_the_teacher_forced_forward(model_dirs, reference, decode):
    """Past FIRST_WIDTH tokens the buffers (and the eager loop's attention mask) have grown: the
    log-probs still match."""
    from rlloom_hf.decode import FIRST_WIDTH

    engine = make_engine(model_dirs["main"], decode=decode)
    out = engine.generate(left_padded(PROMPTS[:2]), SamplingParams(
        n=1, temperature=1.0, max_new_tokens=2 * FIRST_WIDTH + 5, seed=2, ignore_eos=True))
    assert out["responses"].shape[1] == 2 * FIRST_WIDTH + 5
    for row in range(2):
        response = real_response(out, row)
        expected = teacher_forced(reference, PROMPTS[row], response, 1.0)
        assert float((out["rollout_log_probs"][row, : len(response)].double() - expected).abs().max()) < 1e-3


# ------------------------------------------------------------------------------ per-row seeds, cancellation
@pytest.mark.parametrize("decode", ["eager", "static"])
def test_a_sampling_seed_field_gives_each_row_what_its_seed_gives_alone(model_dirs, decode):
    """Rows with seeds 5, 9, 5 in one call: each samples what a call with its seed alone samples."""
    engine = make_engine(model_dirs["main"], decode=decode)
    sampling = SamplingParams(n=2, temperature=1.0, max_new_tokens=6)
    rows, seeds = [PROMPTS[0], PROMPTS[1], PROMPTS[3]], [5, 9, 5]
    batch = _indexed(rows, [0, 1, 2])
    batch["sampling_seed"] = torch.tensor(seeds)
    together = engine.generate(batch, sampling)
    for i, (ids, seed) in enumerate(zip(rows, seeds)):
        alone = engine.generate(left_padded([ids]), dataclasses.replace(sampling, seed=seed, first_prompt=i))
        for j in range(2):
            assert real_response(together, 2 * i + j) == real_response(alone, j)
    first = engine.generate(left_padded([rows[0]]), dataclasses.replace(sampling, seed=9))
    assert real_response(first, 0) != real_response(together, 0)  # the seed matters


@pytest.mark.parametrize("decode", ["eager", "static"])
def test_cancelled_prompts_stop_after_one_step_and_the_others_go_on(model_dirs, decode):
    """Prompt 1 flagged before the call: its rows stop after their first token (the first check,
    before the first decode step), the other prompts' rows equal an uncancelled call's; a chunk
    whose prompts are all flagged is not decoded at all (no model call counted)."""
    engine = make_engine(model_dirs["main"], decode=decode, max_batch_rows=2)
    sampling = SamplingParams(n=2, temperature=1.0, max_new_tokens=12, seed=4, ignore_eos=True)
    full = engine.generate(left_padded(PROMPTS[:3]), sampling)
    steps = engine.decode_steps
    cancelled = torch.tensor([False, True, False])
    cut = engine.generate_requests(left_padded(PROMPTS[:3]), sampling, cancelled)
    assert engine.decode_steps - steps == 2 * 12  # prompts 0 and 2 only: their chunks of 2 rows
    for row in (0, 1, 4, 5):
        assert real_response(cut, row) == real_response(full, row)
    for row in (2, 3):
        assert cut["response_mask"][row].sum() == 0


@pytest.mark.parametrize("decode", ["eager", "static"])
def test_rows_cancelled_within_a_chunk_leave_after_one_step(model_dirs, decode):
    """One chunk holding a flagged and an unflagged prompt: the flagged rows keep their first token
    only, the others equal an uncancelled call's."""
    engine = make_engine(model_dirs["main"], decode=decode, max_batch_rows=8)
    sampling = SamplingParams(n=2, temperature=1.0, max_new_tokens=12, seed=4, ignore_eos=True)
    full = engine.generate(left_padded(PROMPTS[:2]), sampling)
    cut = engine.generate_requests(left_padded(PROMPTS[:2]), sampling, torch.tensor([True, False]))
    assert cut["response_mask"].sum(1).tolist() == [1, 1, 12, 12]
    assert real_response(cut, 0) == real_response(full, 0)[:1]
    assert real_response(cut, 3) == real_response(full, 3)


def test_requests_differing_only_in_seed_share_one_call(model_dirs):
    """16 requests, each with its own seed: one generate call, each answer what it gets alone."""
    import asyncio

    engine = make_engine(model_dirs["main"])
    prompts = _random_prompts(16, seed=8)
    base = SamplingParams(n=1, temperature=1.0, max_new_tokens=6)
    params = [dataclasses.replace(base, seed=100 + i, first_prompt=i) for i in range(16)]

    async def together():
        return await asyncio.gather(*(engine.generate_one(ids, p) for ids, p in zip(prompts, params)))

    answers = asyncio.run(together())
    assert engine._scheduler.generate_calls == 1
    for ids, p, answer in zip(prompts, params, answers):
        assert asyncio.run(engine.generate_one(ids, p)).token_ids == answer.token_ids
    engine.close()


def test_a_request_is_answered_once_its_rows_stop_not_when_the_call_ends(model_dirs):
    """16 requests served by one call whose rows stop at many lengths (an all-zero lm_head): each is answered as
    soon as its responses have stopped (the scheduler's ``finished`` callback), so they complete in the order of
    their longest response, not the order sent, each with what one batch call gives its prompt."""
    import asyncio

    engine = make_engine(model_dirs["main"])
    engine.update_weights([("lm_head.weight", torch.zeros(len(VOCAB), 64))])
    prompts = _random_prompts(16, seed=8)
    sampling = SamplingParams(n=2, temperature=0.7, max_new_tokens=20, seed=3)
    completed = []

    async def one(i: int, ids: list[int]):
        answer = await engine.generate_one(ids, dataclasses.replace(sampling, first_prompt=i))
        completed.append((max(map(len, answer.token_ids)), i))
        return answer

    async def together():
        return await asyncio.gather(*(one(i, ids) for i, ids in enumerate(prompts)))

    answers = asyncio.run(together())
    assert engine._scheduler.generate_calls == 1
    longest = [length for length, _ in completed]
    assert longest == sorted(longest) and longest[0] < longest[-1]
    assert [i for _, i in completed] != list(range(16))
    batch = engine.generate(left_padded(prompts), sampling)
    for i, answer in enumerate(answers):
        assert answer.token_ids == [real_response(batch, 2 * i + j) for j in range(2)]
    engine.close()


# ---------------------------------------------------------------------------------- partial rollouts
class UpdateAfterCalls:
    """The host of a partial generation (:class:`rlloom_enginekit.partial.WeightGate`) for these tests: the
    weights ``updates[i][1]`` arrive once the engine has made ``updates[i][0]`` model calls (prefill and
    decode steps, counted by a forward hook), as an update reaches the rollout process mid-generation."""

    def __init__(self, engine: HFRolloutEngine, updates: list[tuple[int, list]]) -> None:
        self.engine, self.updates, self.version, self.calls, self.watched = engine, list(updates), 0, 0, None
        engine.model.register_forward_hook(self._count)

    def _count(self, *_) -> None:
        self.calls += 1
        self.watch(self.watched)

    def watch(self, cancelled) -> None:
        self.watched = cancelled
        if cancelled is not None and self.updates and self.calls >= self.updates[0][0]:
            cancelled.fill_(True)

    def swap(self) -> None:
        self.engine.update_weights(self.updates.pop(0)[1])
        self.version += 1


def weights_of(path: str) -> list[tuple[str, torch.Tensor]]:
    return list(AutoModelForCausalLM.from_pretrained(path, dtype=torch.float32).state_dict().items())


@pytest.mark.parametrize("decode", ["eager", "static"])
def test_a_generation_interrupted_twice_by_the_same_weights_resumes_to_the_uninterrupted_output(model_dirs, decode):
    """Greedy, 12 tokens, updates (of the weights it has) after model calls 4 and 9: every row resumes from
    its prompt and tokens so far, twice, and ends as the uninterrupted call: the same tokens (none repeated,
    none lost), log-probs as long, versions 0 to 2, counted in ``async/interrupted|resumed``."""
    from rlloom_enginekit.partial import generate_partial

    engine = make_engine(model_dirs["main"], decode=decode)
    sampling = SamplingParams(n=2, temperature=0.0, max_new_tokens=12, ignore_eos=True)
    full = engine.generate(left_padded(PROMPTS[:3]), sampling)
    same = weights_of(model_dirs["main"])
    gate = UpdateAfterCalls(engine, [(4, same), (9, same)])
    out = generate_partial(engine, left_padded(PROMPTS[:3]), sampling, gate)
    assert gate.version == 2 and not gate.updates
    assert torch.equal(out["responses"], full["responses"]) and torch.equal(out["response_mask"], full["response_mask"])
    assert torch.allclose(out["rollout_log_probs"], full["rollout_log_probs"], atol=1e-4)
    assert out["weight_version"].tolist() == [0] * 6 and out["weight_version_max"].tolist() == [2] * 6
    assert out.meta["metrics"] == {"async/interrupted": 6.0, "async/resumed": 12.0}
    assert "interrupted" not in out


def test_tokens_after_an_update_are_the_new_weights_and_the_budget_holds(model_dirs, reference):
    """Sampled (seeded) responses of up to 10 tokens, the ``other`` model's weights arriving after 5 model
    calls: each response holds at most 10 tokens, one log-prob per token; an interrupted row's log-probs are
    the ``main`` model's (teacher-forced) up to the swap and the ``other`` model's after it (so no token was
    repeated or lost at the seam), and its versions are 0 and 1; a row that stopped before is version 0."""
    from rlloom_enginekit.partial import generate_partial

    other = AutoModelForCausalLM.from_pretrained(model_dirs["other"], dtype=torch.float32,
                                                 attn_implementation="eager").eval()
    engine = make_engine(model_dirs["main"], decode="eager")
    sampling = SamplingParams(n=3, temperature=1.0, max_new_tokens=10, seed=7)
    out = generate_partial(engine, left_padded(PROMPTS), sampling,
                           UpdateAfterCalls(engine, [(5, weights_of(model_dirs["other"]))]))
    lengths = out["response_mask"].sum(dim=1)
    assert int(lengths.max()) <= 10 and torch.equal(out["response_mask"].bool(), out["rollout_log_probs"] < 0)
    swapped = out["weight_version_max"] == 1
    assert swapped.any() and out.meta["metrics"]["async/interrupted"] == float(swapped.sum())
    for row in range(len(out)):
        prompt, response = PROMPTS[row // 3], real_response(out, row)
        got = out["rollout_log_probs"][row, : len(response)].double()
        old = (got - teacher_forced(reference, prompt, response, 1.0)).abs() < 1e-3
        new = (got - teacher_forced(other, prompt, response, 1.0)).abs() < 1e-3
        seam = int(old.long().cumprod(dim=0).sum())  # the tokens the main model's weights sampled
        assert out["weight_version"][row] == 0 and (seam == len(response)) == (not swapped[row])
        assert seam >= 1 and bool(new[seam:].all())


@pytest.mark.parametrize("decode", ["eager", "static"])
def test_streamed_groups_are_each_jobs_own_rows_sent_as_they_finish(model_dirs, decode):
    """Two jobs (seeds 3 and 4) in one streamed call: each group sent equals its prompt's rows of the job's
    own ``generate`` (tokens, mask; log-probs within 1e-5), every prompt once; in the eager loop a group is
    sent once its longest response stopped, so groups arrive shortest-longest first (rows that run to the
    24-token cap, and in the static loop every row, are sent when their chunk ends)."""
    from rlloom_enginekit.stream import StreamsRows, generate_groups

    engine = make_engine(model_dirs["main"], decode=decode)
    assert isinstance(engine, StreamsRows)
    base = SamplingParams(n=3, temperature=1.0, max_new_tokens=24)
    jobs = [(left_padded(PROMPTS[:3], objects={"uid": ["a0", "a1", "a2"]}), dataclasses.replace(base, seed=3)),
            (left_padded(PROMPTS[3:], objects={"uid": ["b0"]}), dataclasses.replace(base, seed=4))]
    sent = []
    generate_groups(engine, jobs, lambda job, row, group: sent.append((job, row, group)))
    assert sorted((job, row) for job, row, _ in sent) == [(0, 0), (0, 1), (0, 2), (1, 0)]
    for job, row, group in sent:
        own = engine.generate(*jobs[job])
        rows = own.reorder([row * 3 + k for k in range(3)])
        width = group["responses"].shape[1]
        assert width == int(rows["response_mask"].sum(dim=1).max())
        assert torch.equal(group["responses"], rows["responses"][:, :width])
        assert torch.equal(group["response_mask"], rows["response_mask"][:, :width])
        assert torch.allclose(group["rollout_log_probs"], rows["rollout_log_probs"][:, :width], atol=1e-5)
        assert list(group["uid"]) == [jobs[job][0]["uid"][row]] * 3 and group.meta["pad_token_id"] == PAD
    longest = [int(group["response_mask"].sum(dim=1).max()) for _, _, group in sent]
    if decode == "eager":
        assert longest == sorted(longest) and min(longest) < 24  # shortest first: sent as they finished


class JoinAfterCalls(UpdateAfterCalls):
    """:class:`UpdateAfterCalls` that is also a :class:`rlloom_enginekit.stream.StreamGate`: the jobs ``joining``
    arrive once the engine has made ``at`` model calls."""

    def __init__(self, engine: HFRolloutEngine, updates: list[tuple[int, list]], at: int, joining: list) -> None:
        super().__init__(engine, updates)
        self.at, self.joining = at, joining

    def watch(self, cancelled) -> None:
        super().watch(cancelled)
        if cancelled is not None and self.joining and self.calls >= self.at:
            cancelled.fill_(True)

    def swap(self) -> None:
        if self.updates and self.calls >= self.updates[0][0]:
            super().swap()

    def more(self) -> list:
        joined, self.joining = self.joining, []
        return joined


def test_a_streamed_call_with_partial_rollouts_takes_new_jobs_and_weights_mid_generation(model_dirs):
    """Job a (3 prompts x 2, up to 16 tokens) runs; job b (1 prompt) arrives after 3 model calls and the
    ``other`` weights after 8: every group is sent once, each response within its 16-token budget with one
    log-prob per token; a response whose tokens span the update carries versions 0 and 1; each group counts its
    responses' withdrawals (``async/interrupted|resumed``)."""
    from rlloom_enginekit.stream import generate_groups

    engine = make_engine(model_dirs["main"], decode="eager")
    sampling = SamplingParams(n=2, temperature=1.0, max_new_tokens=16, ignore_eos=True)
    joining = [(left_padded(PROMPTS[3:], objects={"uid": ["b0"]}), dataclasses.replace(sampling, seed=4))]
    gate = JoinAfterCalls(engine, [(8, weights_of(model_dirs["other"]))], 3, joining)
    sent = []
    first = (left_padded(PROMPTS[:3], objects={"uid": ["a0", "a1", "a2"]}), dataclasses.replace(sampling, seed=3))
    generate_groups(engine, [first], lambda job, row, group: sent.append((job, row, group)), gate)
    assert sorted((job, row) for job, row, _ in sent) == [(0, 0), (0, 1), (0, 2), (1, 0)] and gate.version == 1
    for _, _, group in sent:
        assert group["response_mask"].sum(dim=1).tolist() == [16, 16]  # ignore_eos: exactly the budget
        assert torch.equal(group["response_mask"].bool(), group["rollout_log_probs"] < 0)
    spans = {(int(low), int(high)) for _, _, group in sent
             for low, high in zip(group["weight_version"], group["weight_version_max"])}
    assert (0, 1) in spans and spans <= {(0, 0), (0, 1), (1, 1)}
    # withdrawn when job b joined (job a's rows) and when the weights came (every row): the resumptions counted
    assert sorted((job, group.meta["metrics"]["async/interrupted"], group.meta["metrics"]["async/resumed"])
                  for job, _, group in sent) == [(0, 2.0, 4.0)] * 3 + [(1, 2.0, 2.0)]


def test_a_gated_streamed_call_not_withdrawn_sends_each_jobs_own_responses(model_dirs):
    """With partial rollouts on (a gate) but no update nor job arriving, each group of a streamed call is its
    job's own ``generate`` output for that prompt: a row with no token yet draws its job's stream (version 0)."""
    from rlloom_enginekit.stream import generate_groups

    engine = make_engine(model_dirs["main"], decode="eager")
    job = (left_padded(PROMPTS[:3], objects={"uid": ["a0", "a1", "a2"]}),
           SamplingParams(n=3, temperature=1.0, max_new_tokens=10, seed=5))
    own = engine.generate(*job)
    sent = []
    generate_groups(engine, [job], lambda _job, row, group: sent.append((row, group)), JoinAfterCalls(engine, [], 0, []))
    assert sorted(row for row, _ in sent) == [0, 1, 2]
    for row, group in sent:
        rows = own.reorder([row * 3 + k for k in range(3)])
        width = group["responses"].shape[1]
        assert torch.equal(group["responses"], rows["responses"][:, :width])
        assert torch.allclose(group["rollout_log_probs"], rows["rollout_log_probs"][:, :width], atol=1e-5)
        assert group["weight_version"].tolist() == group["weight_version_max"].tolist() == [0, 0, 0]
