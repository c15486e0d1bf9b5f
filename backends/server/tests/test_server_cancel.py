"""A real ``rlloom serve`` process (the hf engine on the tiny model): requests with distinct seeds
batched together get what they get alone; a request that times out
(504), whose client disconnects (plain and streamed) or that ``/abort_request`` aborts stops its
work in the engine, counted by the engine's decode steps (``/get_server_info``), not by wall time."""

from __future__ import annotations

import asyncio

import aiohttp
import pytest

from rlloom_server.testing import ServerProcess

PROMPTS, N, TOKENS = 32, 64, 250
LONG = {"input_ids": [[5 + i % 20, 6, 7] for i in range(PROMPTS)],
        "sampling_params": {"temperature": 1.0, "n": N, "max_new_tokens": TOKENS, "ignore_eos": True,
                            "sampling_seed": 1}}
"""2048 rows of 250 tokens: 32 chunks of 64 rows (the hf engine's default), 8000 decode steps in
all when nothing stops it (tens of seconds on a CPU)."""
FULL_STEPS = PROMPTS * N // 64 * TOKENS
SMALL = {"input_ids": [5, 6, 7], "sampling_params": {"temperature": 0.0, "max_new_tokens": 4, "ignore_eos": True}}


@pytest.fixture(scope="module")
def server(model_cache):
    process = ServerProcess("preset=tiny", f"model.cache_dir={model_cache}", "--request-timeout-s", "2")
    yield process
    process.stop()


async def decode_steps(session: aiohttp.ClientSession, url: str) -> int:
    async with session.get(url + "/get_server_info") as response:
        return (await response.json())["decode_steps"]


async def steps_of(url: str, stop_long) -> tuple[int, object]:
    """The decode steps the engine ran for a long request stopped by ``stop_long(session)`` (which
    returns what the long request got) and a small request sent after it, and that result. The
    small request is served (200, 4 tokens) once the engine is free."""
    async with aiohttp.ClientSession() as session:
        before = await decode_steps(session, url)
        result = await stop_long(session)
        async with session.post(url + "/generate", json=SMALL) as response:
            assert response.status == 200
            assert len((await response.json())["output_ids"]) == 4
        return await decode_steps(session, url) - before, result


def test_a_request_that_times_out_stops_its_work(server):
    async def long_request(session):
        async with session.post(server.url + "/generate", json=LONG) as response:
            return response.status

    steps, status = asyncio.run(steps_of(server.url, long_request))
    assert status == 504
    assert steps < FULL_STEPS // 2, (steps, FULL_STEPS)


@pytest.mark.parametrize("stream", [False, True])
def test_a_client_that_disconnects_stops_its_work(server, stream):
    async def disconnecting(session):
        with pytest.raises(asyncio.TimeoutError):
            async with session.post(server.url + "/generate", json={**LONG, "stream": stream},
                                    timeout=aiohttp.ClientTimeout(total=0.5)) as response:
                await response.read()
        return None

    steps, _ = asyncio.run(steps_of(server.url, disconnecting))
    assert steps < FULL_STEPS // 2, (steps, FULL_STEPS)


def test_abort_request_stops_the_requests_of_its_rid_and_answers_them(server):
    async def aborted(session):
        async def long_request():
            async with session.post(server.url + "/generate", json={**LONG, "rid": "long-one"}) as response:
                return response.status, await response.json()
        running = asyncio.ensure_future(long_request())
        await asyncio.sleep(0.5)
        async with session.post(server.url + "/abort_request", json={"rid": "long-one"}) as response:
            assert (response.status, await response.json()) == (200, {"aborted": 1})
        async with session.post(server.url + "/abort_request", json={"rid": 7}) as response:
            assert response.status == 400
        return await running

    steps, (status, outputs) = asyncio.run(steps_of(server.url, aborted))
    assert status == 200 and len(outputs) == PROMPTS * N
    assert {o["meta_info"]["finish_reason"]["type"] for o in outputs} == {"abort"}
    assert {o["meta_info"]["id"] for o in outputs} == {"long-one"}
    assert steps < FULL_STEPS // 2, (steps, FULL_STEPS)


def test_requests_with_distinct_seeds_share_calls_and_get_what_they_get_alone(server):
    """8 requests sent at once, each with its own seed,
    get the tokens each gets when sent alone (they share engine calls: the seed is per row)."""
    bodies = [{"input_ids": [5 + i, 6, 7], "sampling_params": {"temperature": 1.0, "max_new_tokens": 8,
                                                                "sampling_seed": 40 + i}} for i in range(8)]

    async def answers(together: bool) -> list[list[int]]:
        async with aiohttp.ClientSession() as session:
            async def one(body):
                async with session.post(server.url + "/generate", json=body) as response:
                    assert response.status == 200
                    return (await response.json())["output_ids"]
            if together:
                return await asyncio.gather(*(one(b) for b in bodies))
            return [await one(b) for b in bodies]

    together = asyncio.run(answers(True))
    assert together == asyncio.run(answers(False))
    assert len({tuple(ids) for ids in together}) > 1
