"""The HTTP schema both ways, on fixtures written from SGLang's documented /generate request and
answer (GenerateReqInput: input_ids, sampling_params, return_logprob; answer: output_ids and
meta_info with finish_reason and output_token_logprobs as [log_prob, token_id, text])."""

from __future__ import annotations

import dataclasses

import pytest
from rlloom import Completion, SamplingParams

from rlloom_serverkit.schema import (
    DEFAULT_MAX_NEW_TOKENS,
    SchemaError,
    generate_bodies,
    merge_completions,
    parse_generate,
    parse_generate_answer,
    sample_seed,
    render_generate,
)

# What an SGLang client sends for one prompt, token in / token out.
SGLANG_REQUEST = {
    "input_ids": [101, 7, 42],
    "sampling_params": {"temperature": 0.7, "top_p": 0.9, "top_k": 20, "max_new_tokens": 16, "n": 2,
                        "ignore_eos": False, "sampling_seed": 1234},
    "return_logprob": True,
}
# What SGLang answers for n=2 (one object per sample), trimmed to the fields rlloom reads.
SGLANG_ANSWER = [
    {"text": "ab", "output_ids": [5, 2],
     "meta_info": {"id": "a1", "finish_reason": {"type": "stop", "matched": 2}, "prompt_tokens": 3,
                   "completion_tokens": 2, "output_token_logprobs": [[-0.5, 5, "a"], [-1.25, 2, "b"]]}},
    {"text": "ccc", "output_ids": [9, 9, 9],
     "meta_info": {"id": "a2", "finish_reason": {"type": "length", "length": 3}, "prompt_tokens": 3,
                   "completion_tokens": 3, "output_token_logprobs": [[-2.0, 9, "c"], [-0.1, 9, "c"], [-0.2, 9, "c"]]}},
]


def test_sglang_request_parses_to_sampling_params():
    parsed = parse_generate(SGLANG_REQUEST)
    assert parsed.prompts == [[101, 7, 42]] and parsed.return_logprob and not parsed.batched
    assert parsed.sampling == SamplingParams(n=2, temperature=0.7, top_p=0.9, top_k=20, max_new_tokens=16,
                                             seed=1234, first_prompt=0)


def test_batched_input_and_prompt_index():
    parsed = parse_generate({"input_ids": [[1, 2], [3]], "prompt_index": 5, "sampling_params": {"temperature": 0}})
    assert parsed.batched and parsed.prompts == [[1, 2], [3]]
    assert parsed.sampling.first_prompt == 5 and parsed.sampling.greedy and parsed.response_index == 0
    assert parse_generate({"input_ids": [1], "response_index": 3}).response_index == 3


@pytest.mark.parametrize("body, named", [
    ([1, 2], "JSON object"),
    ({"text": "hi"}, "unknown field.*text"),  # text is rlloom serve's dialect's, not the token core's
    ({"input_ids": []}, "input_ids"),
    ({"input_ids": [1, -2]}, "non-negative"),
    ({"input_ids": [[1], []]}, "input_ids[1]"),
    ({"input_ids": [1], "sampling_params": {"max_new_tokens": "8"}}, "sampling_params.max_new_tokens"),
    ({"input_ids": [1], "sampling_params": {"n": True}}, "sampling_params.n"),
    ({"input_ids": [1], "sampling_params": {"frequency_penalty": 1.0}}, "frequency_penalty"),
    ({"input_ids": [1], "sampling_params": {"top_p": 0.0}}, "sampling_params.top_p"),
    ({"input_ids": [1], "prompt_index": -1}, "prompt_index"),
    ({"input_ids": [1], "response_index": -1}, "response_index"),
    ({"input_ids": [1], "sampling_params": {"n": 2}, "response_index": 2**63 - 1}, "response_index"),
    ({"input_ids": [1], "lora_path": 3}, "lora_path must name a loaded LoRA adapter"),
    ({"input_ids": [1], "stream": True}, "stream"),
    ({"input_ids": [2**70]}, "int64"),
    ({"input_ids": [[1], [2**63]]}, r"input_ids[1]"),
    ({"input_ids": [1], "sampling_params": {"temperature": float("nan")}}, "sampling_params.temperature must be finite"),
    ({"input_ids": [1], "sampling_params": {"temperature": float("inf")}}, "sampling_params.temperature must be finite"),
    ({"input_ids": [1], "sampling_params": {"top_p": float("nan")}}, "sampling_params.top_p"),
    ({"input_ids": [1], "sampling_params": {"sampling_seed": -1}}, "sampling_params.sampling_seed"),
    ({"input_ids": [1], "sampling_params": {"sampling_seed": 2**64}}, "sampling_params.sampling_seed"),
    ({"input_ids": [1], "sampling_params": {"sampling_seed": 1.5}}, "sampling_params.sampling_seed"),
    ({"input_ids": [1], "sampling_params": {"top_k": 2**70}}, "sampling_params.top_k"),
    ({"input_ids": [1], "sampling_params": {"n": 2**64}}, "sampling_params.n"),
    ({"input_ids": [1], "sampling_params": {"max_new_tokens": 0}}, "sampling_params.max_new_tokens"),
    ({"input_ids": [[1], [2]], "prompt_index": 2**63 - 1}, "prompt_index"),
    ({"input_ids": [1], "return_logprob": "false"}, "return_logprob"),
])
def test_malformed_requests_name_the_field(body, named):
    with pytest.raises(SchemaError, match=named.replace("[", r"\[").replace("]", r"\]")):
        parse_generate(body)


def test_json_nan_and_infinity_literals_are_refused():
    """Python's json (aiohttp's request.json) reads NaN and Infinity: they must not pass as floats."""
    import json

    for literal in ("NaN", "Infinity", "-Infinity"):
        with pytest.raises(SchemaError, match="sampling_params.temperature must be finite"):
            parse_generate(json.loads('{"input_ids": [1], "sampling_params": {"temperature": %s}}' % literal))


def test_max_new_tokens_defaults_to_sglangs_128_and_says_it_was_not_given():
    default = parse_generate({"input_ids": [1], "return_logprob": None})
    assert default.sampling.max_new_tokens == DEFAULT_MAX_NEW_TOKENS == 128
    assert not default.max_new_tokens_given and not default.return_logprob
    given = parse_generate({"input_ids": [1], "sampling_params": {"max_new_tokens": 7}})
    assert given.sampling.max_new_tokens == 7 and given.max_new_tokens_given


def test_render_then_parse_round_trip_and_shapes():
    answer = Completion(token_ids=[[5, 2], [9, 9, 9]], log_probs=[[-0.5, -1.25], [-2.0, -0.1, -0.2]],
                        finish_reasons=["stop", "length"])
    request = parse_generate(SGLANG_REQUEST)
    rendered = render_generate(request, [answer])
    assert [o["output_ids"] for o in rendered] == [[5, 2], [9, 9, 9]]
    assert rendered[0]["meta_info"]["finish_reason"] == {"type": "stop", "matched": 2}
    assert rendered[1]["meta_info"]["finish_reason"] == {"type": "length", "length": 3}
    assert rendered[1]["meta_info"]["output_token_logprobs"][0] == [-2.0, 9, None]
    assert parse_generate_answer(rendered, 2) == answer
    withdrawn = Completion([[5], []], [[-0.5], []], ["abort", "abort"])
    cut = render_generate(request, [withdrawn])
    assert cut[0]["meta_info"]["finish_reason"]["type"] == "abort" and parse_generate_answer(cut, 2) == withdrawn
    single = render_generate(parse_generate({"input_ids": [1]}), [Completion([[4]], [[-1.0]], ["stop"])])
    assert isinstance(single, dict) and "output_token_logprobs" not in single["meta_info"]


def test_sglang_answer_parses():
    completion = parse_generate_answer(SGLANG_ANSWER, 2)
    assert completion.token_ids == [[5, 2], [9, 9, 9]]
    assert completion.log_probs == [[-0.5, -1.25], [-2.0, -0.1, -0.2]]
    assert completion.finish_reasons == ["stop", "length"]


@pytest.mark.parametrize("answer, n, named", [
    (SGLANG_ANSWER, 3, "expected 3 output"),
    ([{"output_ids": [1]}], 1, "meta_info"),
    ([{"output_ids": "x", "meta_info": {}}], 1, "output_ids"),
    ([{"output_ids": [1, 2], "meta_info": {"output_token_logprobs": [[-1.0, 1, None]]}}], 1, "output_token_logprobs"),
    ([{"output_ids": [1], "meta_info": {"output_token_logprobs": [[-1.0, 7, None]]}}], 1, "output_token_logprobs"),
])
def test_malformed_answers_are_refused(answer, n, named):
    with pytest.raises(SchemaError, match=named):
        parse_generate_answer(answer, n)


def test_client_bodies_for_both_dialects():
    sampling = SamplingParams(n=3, temperature=1.0, max_new_tokens=8, first_prompt=4)
    (rlloom_body,) = generate_bodies([1, 2], sampling, seed=99, with_prompt_index=True)
    assert parse_generate(rlloom_body).sampling == SamplingParams(n=3, temperature=1.0, max_new_tokens=8,
                                                                  seed=99, first_prompt=4)
    sglang_bodies = generate_bodies([1, 2], sampling, seed=99, with_prompt_index=False)
    assert len(sglang_bodies) == 3 and all("prompt_index" not in body for body in sglang_bodies)
    assert [b["sampling_params"]["n"] for b in sglang_bodies] == [1, 1, 1]
    assert [b["sampling_params"]["sampling_seed"] for b in sglang_bodies] == [sample_seed(99, 4, j) for j in range(3)]
    stopping = generate_bodies([1], SamplingParams(stop_token_ids=(7, 3)), seed=1, with_prompt_index=False)
    assert stopping[0]["sampling_params"]["stop_token_ids"] == [7, 3]
    assert "stop_token_ids" not in sglang_bodies[0]["sampling_params"]
    later = generate_bodies([1, 2], dataclasses.replace(sampling, n=1), seed=99, with_prompt_index=True,
                            response_index=2)
    assert parse_generate(later[0]).response_index == 2 and "response_index" not in rlloom_body
    assert generate_bodies([1, 2], dataclasses.replace(sampling, n=1), seed=99, with_prompt_index=False,
                           response_index=2)[0]["sampling_params"]["sampling_seed"] == sample_seed(99, 4, 2)
    seeds = {sample_seed(99, i, j) for i in range(300) for j in range(4)}
    assert len(seeds) == 1200 and all(0 <= s < 2**63 for s in seeds)


def test_merge_completions_keeps_order_and_drops_missing_log_probs():
    first, second = Completion([[1, 2]], [[-0.1, -0.2]], ["stop"]), Completion([[3]], [[-0.3]], ["length"])
    assert merge_completions([first, second]) == Completion([[1, 2], [3]], [[-0.1, -0.2], [-0.3]], ["stop", "length"])
    assert merge_completions([first, Completion([[3]], None, ["stop"])]).log_probs is None
