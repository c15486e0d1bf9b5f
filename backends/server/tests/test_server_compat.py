"""SGLang's and OpenAI's clients against a real ``rlloom serve`` process (the hf engine, tiny model):
the real ``openai`` client's completions and chat completions, streamed and not, sample exactly
what ``/generate`` samples for the same prompt ids and seed; chat ``tools`` through the template and
``tool_calls`` parsed from the answer; SGLang's text, rid, stop strings and
ids, streaming and strict booleans; the text routes; ``--api-key``."""

from __future__ import annotations

import asyncio
import dataclasses
import json
import urllib.error
import urllib.request

import pytest

openai = pytest.importorskip("openai", reason="needs the real OpenAI client (scripts/bootstrap.sh installs it)")

from rlloom import Completion, EngineSpec, SamplingParams
from rlloom_agentkit.template import render_chat

from rlloom_server.openai_api import ChatDialect, Extras
from rlloom_server.testing import ServerProcess
from rlloom_server.text import Sample, ServedTokenizer
from rlloom_serverkit.client import ServerError, ServerRolloutConfig, ServerRolloutEngine

KEY = "sk-test-key"
EXTRAS = Extras("chatcmpl-1", "m", (), False, False, False, False)
AUTH = {"Authorization": f"Bearer {KEY}"}


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    """One server with ``--api-key`` for the module (every test but the key's sends the key)."""
    process = ServerProcess("preset=tiny", f"model.cache_dir={tmp_path_factory.mktemp('compat_models')}",
                            "--api-key", KEY)
    yield process
    process.stop()


def call(url: str, body=None, headers=AUTH) -> tuple[int, str]:
    """``(status, body text)`` of a POST of ``body`` as JSON (a GET when None)."""
    data = None if body is None else json.dumps(body).encode()
    request = urllib.request.Request(url, data=data, headers={"Content-Type": "application/json", **headers})
    try:
        with urllib.request.urlopen(request, timeout=60) as response:
            return response.status, response.read().decode()
    except urllib.error.HTTPError as error:
        return error.code, error.read().decode()


def post(url: str, body, headers=AUTH):
    status, text = call(url, body, headers)
    return status, json.loads(text)


def events(text: str) -> list:
    """The JSON payloads of a server-sent event stream, which must end with ``data: [DONE]``."""
    payloads = [line.removeprefix("data: ") for line in text.split("\n\n") if line]
    assert payloads[-1] == "[DONE]"
    return [json.loads(p) for p in payloads[:-1]]


def served_model(server) -> str:
    return post(server.url + "/v1/models", None)[1]["data"][0]["id"]


def openai_client(server) -> openai.OpenAI:
    return openai.OpenAI(base_url=server.url + "/v1", api_key=KEY, max_retries=0)


def generate(server, prompt_ids: list[int], n: int, seed: int, max_new_tokens: int) -> list[dict]:
    status, answer = post(server.url + "/generate", {
        "input_ids": prompt_ids, "return_logprob": True,
        "sampling_params": {"n": n, "temperature": 1.0, "max_new_tokens": max_new_tokens, "sampling_seed": seed}})
    assert status == 200, answer
    return answer if isinstance(answer, list) else [answer]


def test_openai_completions_equal_generate_streamed_or_not(server):
    client = openai_client(server)
    (model,) = [card.id for card in client.models.list().data]
    prompt = [72, 105, 33]
    expected = generate(server, prompt, n=2, seed=5, max_new_tokens=6)
    args = dict(model=model, prompt=prompt, max_tokens=6, temperature=1.0, n=2, seed=5, logprobs=0,
                extra_body={"return_token_ids": True})
    answer = client.completions.create(**args)
    assert [c.token_ids for c in answer.choices] == [e["output_ids"] for e in expected]
    for choice, e in zip(answer.choices, expected):
        assert choice.logprobs.token_logprobs == [lp for lp, _, _ in e["meta_info"]["output_token_logprobs"]]
        assert choice.text == e["text"] and choice.finish_reason == "length"
    assert answer.usage.prompt_tokens == 3 and answer.usage.completion_tokens == 12
    chunks = list(client.completions.create(**args, stream=True, stream_options={"include_usage": True}))
    streamed = {c.index: c for chunk in chunks for c in chunk.choices}
    assert [streamed[i].token_ids for i in range(2)] == [e["output_ids"] for e in expected]
    assert [streamed[i].text for i in range(2)] == [c.text for c in answer.choices]
    assert chunks[-1].usage.total_tokens == 15


def test_openai_chat_completions_apply_the_template_and_equal_generate(server):
    client = openai_client(server)
    messages = [{"role": "user", "content": "hi"}]
    tokenizer = ServedTokenizer.load(served_model(server)).tokenizer
    prompt = tokenizer.encode(tokenizer.apply_chat_template(messages, add_generation_prompt=True, tokenize=False),
                              add_special_tokens=False)
    (expected,) = generate(server, prompt, n=1, seed=11, max_new_tokens=5)
    args = dict(model="any", messages=messages, max_tokens=5, temperature=1.0, seed=11, logprobs=True,
                extra_body={"return_token_ids": True})
    answer = client.chat.completions.create(**args)
    (choice,) = answer.choices
    assert choice.prompt_token_ids == prompt and choice.token_ids == expected["output_ids"]
    assert choice.message.role == "assistant" and choice.message.content == expected["text"]
    expected_log_probs = [lp for lp, _, _ in expected["meta_info"]["output_token_logprobs"]]
    assert [t.logprob for t in choice.logprobs.content] == expected_log_probs
    assert answer.object == "chat.completion" and answer.id.startswith("chatcmpl-")
    chunks = list(client.chat.completions.create(**args, stream=True))
    assert [c.object for c in chunks] == ["chat.completion.chunk"]
    (streamed,) = chunks[0].choices
    assert streamed.delta.content == expected["text"] and streamed.token_ids == expected["output_ids"]
    with pytest.raises(openai.BadRequestError, match="top_logprobs"):
        client.chat.completions.create(**args, top_logprobs=2)


def test_chat_tools_go_through_the_template_and_tool_calls_come_back_parsed(server):
    tool = {"type": "function", "function": {"name": "calculator", "description": "adds", "parameters": {
        "type": "object", "properties": {"expression": {"type": "string"}}}}}
    messages = [{"role": "user", "content": "hi"}]
    served = ServedTokenizer.load(served_model(server))
    # the tiny model's template ignores tools: they come as Hermes instructions in a system message (too
    # long for its 256-token context, which the door refuses naming the prompt's length)
    expected = served.encode(render_chat(served.tokenizer, messages, [tool]), add_special_tokens=False)
    assert served.chat_prompt(messages, [tool]) == expected
    assert served.decode(expected).startswith("system: You may call tools.") and len(expected) > 256
    with pytest.raises(openai.BadRequestError, match=f"input_ids\\[0\\] has {len(expected)} tokens"):
        openai_client(server).chat.completions.create(model="any", messages=messages, tools=[tool], max_tokens=3)
    call = '<tool_call>{"name": "calculator", "arguments": {"expression": "1+2"}}</tool_call>'
    choice = ChatDialect(served, "m")._choice(0, Sample([1], None, f"Let me see. {call}", "stop", 1),
                                              dataclasses.replace(EXTRAS, tools=True), streamed=False)
    assert choice["message"]["content"] == f"Let me see. {call}" and choice["finish_reason"] == "tool_calls"
    (parsed,) = choice["message"]["tool_calls"]
    assert parsed["function"] == {"name": "calculator", "arguments": '{"expression": "1+2"}'}
    assert parsed["type"] == "function" and parsed["id"].startswith("call_")
    broken = ChatDialect(served, "m")._choice(0, Sample([1], None, "<tool_call>{oops", "stop", 1),
                                              dataclasses.replace(EXTRAS, tools=True), streamed=False)
    assert "tool_calls" not in broken["message"] and broken["finish_reason"] == "stop"


def test_sglang_text_rid_stream_and_strict_booleans(server):
    status, tokenized = post(server.url + "/tokenize", {"prompt": "Hi!"})
    assert status == 200 and tokenized["tokens"] == [72, 105, 33] and tokenized["count"] == 3
    body = {"text": ["Hi!", "ok"], "rid": ["a", "b"], "return_logprob": False,
            "sampling_params": {"max_new_tokens": 4, "sampling_seed": 2, "min_p": 0.0, "frequency_penalty": 0}}
    status, answer = post(server.url + "/generate", body)
    by_ids = generate(server, [72, 105, 33], n=1, seed=2, max_new_tokens=4)[0]
    assert status == 200 and answer[0]["output_ids"] == by_ids["output_ids"]
    assert [a["meta_info"]["id"] for a in answer] == ["a", "b"]
    assert "output_token_logprobs" not in answer[0]["meta_info"]
    status, text = post(server.url + "/detokenize", {"tokens": [a["output_ids"] for a in answer]})
    assert text["text"] == [a["text"] for a in answer]
    status, text = call(server.url + "/generate", {**body, "stream": True})
    assert status == 200 and events(text) == [{**a, "index": k} for k, a in enumerate(answer)]
    for field, value in [("return_logprob", "false"), ("stream", 1)]:
        status, error = post(server.url + "/generate", {"input_ids": [1], field: value})
        assert status == 400 and field in error["error"]["message"]


@pytest.mark.parametrize("body, named", [
    ({"sampling_params": {"min_p": 0.1}}, "sampling_params.min_p"),
    ({"sampling_params": {"presence_penalty": 0.5}}, "sampling_params.presence_penalty"),
    ({"sampling_params": {"repetition_penalty": 1.2}}, "sampling_params.repetition_penalty"),
    ({"logprob_start_len": 0}, "logprob_start_len"),
    ({"top_logprobs_num": 5}, "top_logprobs_num"),
    ({"sampling_params": {"stop_token_ids": [10**6]}}, "sampling_params.stop_token_ids"),
])
def test_what_the_engines_cannot_do_is_refused_naming_the_field(server, body, named):
    status, error = post(server.url + "/generate", {"input_ids": [5, 6], **body})
    assert status == 400 and named in error["error"]["message"]


@pytest.mark.parametrize("path, body, named", [
    ("completions", {"prompt": "hi", "logprobs": 2}, "logprobs"),
    ("completions", {"prompt": "hi", "presence_penalty": 0.5}, "presence_penalty"),
    ("completions", {"prompt": "hi", "echo": True}, "echo"),
    ("completions", {"prompt": "", "max_tokens": 2}, "prompt"),
    ("completions", {"prompt": [1, 10**6]}, "prompt"),
    ("completions", {"prompt": "hi", "max_tokens": 0}, "max_tokens"),
    ("chat/completions", {"messages": [{"role": "user", "content": "hi"}], "tools": [{"type": "function"}]},
     "tools[0]"),
    ("chat/completions", {"messages": [{"role": "user", "content": "hi"}], "tool_choice": "required"},
     "tool_choice"),
    ("chat/completions", {"messages": [{"role": "user", "content": 3}]}, "messages[0].content"),
    ("chat/completions", {"messages": [{"role": "user", "content": "hi"}], "logprobs": "yes"}, "logprobs"),
])
def test_openai_requests_the_engines_cannot_serve_get_400_naming_the_field(server, path, body, named):
    status, error = post(f"{server.url}/v1/{path}", {"model": "any", **body})
    assert status == 400 and named in error["error"]["message"], error


def test_stop_ids_end_in_the_engine_and_stop_strings_cut_the_answer(server):
    def run(**params):
        status, answer = post(server.url + "/generate", {"input_ids": [5, 6, 7], "sampling_params": {
            "max_new_tokens": 12, "sampling_seed": 4, "ignore_eos": True, **params}})
        assert status == 200, answer
        return answer

    free = run()
    tokens = free["output_ids"]
    stop_id = tokens[3]
    stopped = run(stop_token_ids=[stop_id])
    assert stopped["output_ids"] == tokens[: tokens.index(stop_id) + 1]
    assert stopped["meta_info"]["finish_reason"] == {"type": "stop", "matched": stop_id}
    stop = max((ch for ch in free["text"] if ch != "\ufffd"), key=lambda ch: len(ch.encode()))  # several bytes
    assert len(stop.encode()) > 1  # spelled by several tokens
    cut = run(stop=[stop])
    kept = cut["output_ids"]
    assert cut["text"] == free["text"][: free["text"].index(stop)]
    assert cut["meta_info"]["finish_reason"] == {"type": "stop", "matched": stop}
    assert kept == tokens[: len(kept)] and len(kept) < len(tokens)
    spelled = post(server.url + "/detokenize", {"tokens": [kept, kept[:-1]]})[1]["text"]
    assert stop in spelled[0] and stop not in spelled[1]


def test_a_stop_string_keeps_the_tokens_that_spell_it(server):
    tokenizer = ServedTokenizer.load(served_model(server))
    ids = tokenizer.encode("abcXYdeXY")  # the tiny tokenizer: one token per byte
    (sample,) = tokenizer.samples(Completion([ids], [[-1.0] * len(ids)], ["length"]), ("de", "XY"))
    assert sample.text == "abc" and sample.tokens == ids[:5] and sample.log_probs == [-1.0] * 5
    assert sample.finish == "stop" and sample.matched == "XY"


def test_api_key_guards_every_route_but_health(server):
    assert call(server.url + "/health", headers={})[0] == 200
    for path, body in [("/generate", {"input_ids": [1]}), ("/v1/models", None), ("/health_generate", None),
                       ("/get_server_info", None), ("/update_weights_from_disk", {"model_path": "/"})]:
        assert call(server.url + path, body, headers={})[0] == 401, path
        assert call(server.url + path, body, headers={"Authorization": "Bearer wrong"})[0] == 401, path
    assert call(server.url + "/health_generate")[0] == 200
    status, info = post(server.url + "/get_server_info", None)
    assert status == 200 and info["api_key_required"] and KEY not in json.dumps(info)
    with pytest.raises(openai.AuthenticationError):
        openai.OpenAI(base_url=server.url + "/v1", api_key="wrong", max_retries=0).models.list()
    model = served_model(server)
    sampling = SamplingParams(temperature=1.0, max_new_tokens=3, seed=1)
    engine = ServerRolloutEngine(ServerRolloutConfig(urls=[server.url], api_key=KEY), EngineSpec(model, "rollout", 0))
    assert len(asyncio.run(engine.generate_one([5, 6], sampling)).token_ids[0]) == 3
    keyless = ServerRolloutEngine(ServerRolloutConfig(urls=[server.url]), EngineSpec(model, "rollout", 0))
    with pytest.raises(ServerError, match="401"):
        asyncio.run(keyless.generate_one([5, 6], sampling))
