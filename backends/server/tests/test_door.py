"""The checks of a /generate request against the model and the server's limits
(:mod:`rlloom_server.door`) and the token budget (:mod:`rlloom_server.budget`), without a server."""

from __future__ import annotations

import asyncio

import pytest

from rlloom_server.budget import TokenBudget
from rlloom_server.config import ServeConfig
from rlloom_server.door import Limits, RequestTooLarge, admit, server_limits
from rlloom_serverkit.schema import SchemaError, parse_generate

LIMITS = Limits(vocab_size=100, context_length=50, max_n=4, max_new_tokens_limit=40, max_total_tokens=200)


def checked(body: dict, limits: Limits = LIMITS):
    return admit(parse_generate(body), limits)


@pytest.mark.parametrize("body, named", [
    ({"input_ids": [1, 100]}, "input_ids holds token id 100, outside the model's vocabulary of 100"),
    ({"input_ids": [[1], [3, 250]]}, r"input_ids\[1\] holds token id 250"),
    ({"input_ids": [1] * 50}, "input_ids has 50 tokens; the model's context length is 50"),
    ({"input_ids": [1], "sampling_params": {"n": 5}}, r"sampling_params.n=5 is over .* 4 \(--max-n\)"),
    ({"input_ids": [1], "sampling_params": {"max_new_tokens": 41}},
     r"sampling_params.max_new_tokens=41 is over .* 40 \(--max-new-tokens-limit\)"),
    ({"input_ids": [1] * 20, "sampling_params": {"max_new_tokens": 31}},
     "max_new_tokens=31 plus the longest prompt .20 tokens. exceeds the model's context length of 50"),
])
def test_requests_outside_the_model_or_the_limits_name_the_field(body, named):
    with pytest.raises(SchemaError, match=named):
        checked(body)


def test_cost_is_n_times_prompt_plus_new_tokens_and_over_the_budget_is_too_large():
    request, cost = checked({"input_ids": [[1, 2, 3], [4]], "sampling_params": {"n": 3, "max_new_tokens": 10}})
    assert cost == 3 * ((3 + 10) + (1 + 10)) == 72 and request.sampling.max_new_tokens == 10
    assert checked({"input_ids": [1] * 10, "sampling_params": {"n": 4, "max_new_tokens": 40}})[1] == 200
    with pytest.raises(RequestTooLarge, match=r"needs 240 tokens .* budget of 200 \(--max-total-tokens\)"):
        checked({"input_ids": [[1] * 10, [2] * 10], "sampling_params": {"n": 3, "max_new_tokens": 30}})


def test_a_default_max_new_tokens_is_shortened_to_fit_but_a_given_one_is_not():
    request, _ = checked({"input_ids": [1] * 45})  # SGLang's 128 does not fit: 50 - 45 = 5 left
    assert request.sampling.max_new_tokens == 5
    roomy = Limits(100, 1000, 4, 1000, 10**6)
    assert checked({"input_ids": [1] * 45}, roomy)[0].sampling.max_new_tokens == 128
    capped = Limits(100, 1000, 4, 16, 10**6)
    assert checked({"input_ids": [1]}, capped)[0].sampling.max_new_tokens == 16
    with pytest.raises(SchemaError, match="max_new_tokens=6 plus the longest prompt"):
        checked({"input_ids": [1] * 45, "sampling_params": {"max_new_tokens": 6}})


def test_server_limits_read_the_model_config(tmp_path):
    from transformers import Qwen2Config

    Qwen2Config(vocab_size=321, max_position_embeddings=77).save_pretrained(tmp_path)
    limits = server_limits(ServeConfig(max_n=8), str(tmp_path), engine=object())
    assert (limits.vocab_size, limits.context_length, limits.max_n, limits.max_new_tokens_limit) == (321, 77, 8, 77)
    assert limits.max_total_tokens == ServeConfig().max_total_tokens
    assert server_limits(ServeConfig(context_length=30, max_new_tokens_limit=9), str(tmp_path), object()) == Limits(
        321, 30, ServeConfig().max_n, 9, ServeConfig().max_total_tokens)


def test_a_model_without_a_context_length_needs_the_option(tmp_path):
    from transformers import MambaConfig  # a state-space model: no position limit in its config

    MambaConfig(vocab_size=321).save_pretrained(tmp_path)
    with pytest.raises(ValueError, match="names no context length .* give rlloom serve --context-length"):
        server_limits(ServeConfig(), str(tmp_path), engine=object())
    assert server_limits(ServeConfig(context_length=64), str(tmp_path), object()).context_length == 64


def test_budget_admits_in_arrival_order_and_a_withdrawn_wait_leaves_the_line():
    async def scenario():
        budget = TokenBudget(10)
        order = []

        async def hold(name: str, tokens: int, release: asyncio.Event):
            async with budget.reserve(tokens):
                order.append(name)
                await release.wait()

        first_done, big_done, small_done = asyncio.Event(), asyncio.Event(), asyncio.Event()
        first = asyncio.create_task(hold("first", 6, first_done))
        await asyncio.sleep(0)
        big = asyncio.create_task(hold("big", 8, big_done))       # waits: 6 + 8 > 10
        small = asyncio.create_task(hold("small", 4, small_done))  # would fit, but waits its turn
        withdrawn = asyncio.create_task(hold("withdrawn", 1, asyncio.Event()))
        await asyncio.sleep(0)
        assert order == ["first"] and budget.used == 6
        withdrawn.cancel()
        first_done.set()
        await first
        await asyncio.sleep(0)
        assert order == ["first", "big"] and budget.used == 8
        big_done.set()
        await big
        await asyncio.sleep(0)
        assert order == ["first", "big", "small"] and budget.used == 4
        small_done.set()
        await small
        with pytest.raises(asyncio.CancelledError):
            await withdrawn
        assert budget.used == 0 and not budget._waiting
        with pytest.raises(ValueError, match="1 to 10 tokens"):
            async with budget.reserve(11):
                pass

    asyncio.run(scenario())
