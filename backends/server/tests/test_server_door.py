"""A real ``rlloom serve`` process (the hf engine on the tiny model, 256 positions): every bad
request of issue 33 sent at the same moment as good ones gets its 4xx naming the field or limit,
and the good ones get 200 with the tokens they get when sent alone."""

from __future__ import annotations

import asyncio
import json
import os
import urllib.request

import aiohttp
import pytest

from rlloom_server.testing import ServerProcess

GOOD = [{"input_ids": ids, "sampling_params": {"temperature": 1.0, "max_new_tokens": 8, "sampling_seed": 11},
         "prompt_index": i, "return_logprob": True} for i, ids in enumerate([[5, 6, 7], [8, 9], [10, 11, 12, 13], [14]])]


@pytest.fixture(scope="module")
def server(model_cache):
    """One server for the module (it takes seconds to start): at most 4 samples a request, a budget
    of 300 tokens in flight."""
    process = ServerProcess("preset=tiny", f"model.cache_dir={model_cache}", "--max-n", "4", "--max-total-tokens", "300")
    yield process
    process.stop()


def vocab_size(url: str) -> int:
    with urllib.request.urlopen(url + "/get_model_info", timeout=30) as response:
        folder = json.loads(response.read())["model_path"]
    with open(os.path.join(folder, "config.json")) as config:
        return json.load(config)["vocab_size"]


def with_params(**params) -> dict:
    return {**GOOD[0], "sampling_params": {**GOOD[0]["sampling_params"], **params}}


async def send_all(url: str, bodies: list[dict]) -> list[tuple[int, object]]:
    async with aiohttp.ClientSession() as session:
        async def one(body):
            async with session.post(url + "/generate", json=body) as response:
                return response.status, await response.json()
        return await asyncio.gather(*(one(body) for body in bodies))


def bad_requests(vocab: int) -> list[tuple[dict, int, str]]:
    """(body, status, what the error names): the list of issue 33, and the server's limits."""
    return [
        ({**GOOD[0], "input_ids": [5, vocab]}, 400, f"token id {vocab}, outside the model's vocabulary"),
        ({**GOOD[0], "input_ids": [5, 2**70]}, 400, "input_ids must hold non-negative integer token ids (int64)"),
        (with_params(temperature=float("nan")), 400, "sampling_params.temperature must be finite"),
        (with_params(temperature=float("inf")), 400, "sampling_params.temperature must be finite"),
        (with_params(sampling_seed=-1), 400, "sampling_params.sampling_seed"),
        (with_params(sampling_seed=1.5), 400, "sampling_params.sampling_seed"),
        ({**GOOD[0], "input_ids": [5] * 300}, 400, "input_ids has 300 tokens; the model's context length is 256"),
        (with_params(max_new_tokens=254), 400, "exceeds the model's context length of 256"),
        (with_params(n=5), 400, "sampling_params.n=5 is over this server's limit of 4 (--max-n)"),
        (with_params(max_new_tokens=1_000_000_000), 400, "sampling_params.max_new_tokens=1000000000 is over"),
        (with_params(n=4, max_new_tokens=100), 413, "needs 412 tokens (n x (prompt + max_new_tokens) summed over its prompts), over this server's budget of 300 (--max-total-tokens)"),
    ]


def test_bad_requests_get_their_4xx_and_never_fail_the_good_ones_beside_them(server):
    alone = [asyncio.run(send_all(server.url, [body]))[0] for body in GOOD]
    assert all(status == 200 for status, _ in alone), alone
    for bad, status, named in bad_requests(vocab_size(server.url)):
        answers = asyncio.run(send_all(server.url, [bad, *GOOD]))
        assert answers[0][0] == status and named in answers[0][1]["error"]["message"], (bad, answers[0])
        for (got_status, got), (_, want) in zip(answers[1:], alone):
            assert got_status == 200 and got["output_ids"] == want["output_ids"], (bad, got)


def test_requests_over_the_token_budget_wait_their_turn_and_all_succeed(server):
    """16 requests of about 1-4 + 64 tokens with a budget of 300: at most 4 in flight, none refused."""
    bodies = [{**GOOD[i % 4], "prompt_index": i, "sampling_params": {**GOOD[0]["sampling_params"], "max_new_tokens": 64}}
              for i in range(16)]
    answers = asyncio.run(send_all(server.url, bodies))
    assert [status for status, _ in answers] == [200] * 16
    alone = asyncio.run(send_all(server.url, bodies[5:6]))[0]
    assert answers[5][1]["output_ids"] == alone[1]["output_ids"]


def test_max_new_tokens_defaults_to_sglangs_128_shortened_to_the_context(server):
    answers = asyncio.run(send_all(server.url, [{"input_ids": prompt, "sampling_params": {"ignore_eos": True}}
                                                for prompt in ([5, 6], [5] * 250)]))
    assert [(status, len(answer["output_ids"])) for status, answer in answers] == [(200, 128), (200, 6)]
