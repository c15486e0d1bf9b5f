"""A real ``rlloom serve`` (default: the hf engine on the tiny preset) under load, in one run:

1. **seeds**: R concurrent ``/generate`` requests (one random prompt each, ``max_new_tokens`` T,
   temperature 1), once without a seed and once with a distinct ``sampling_seed`` each; their wall
   times (``--repeats`` bursts of each), the ratio of their medians seeded / unseeded (issue 33:
   ≤ 1.5x; before per-row seeds the server ran one engine call per distinct seed) and the engine's
   decode steps per burst (``/get_server_info``: equal counts mean equal batching);
2. **load**: a bounded loopback load test: C clients send ``--load-requests`` requests in all (each
   client one at a time, distinct seeds), every request's latency recorded: p50, p99, throughput.

Each phase is preceded by a warm-up request. Every answer must be 200 with T tokens.

    python bench/bench_server.py                       # R=200, T=16, load 400 requests over 32 clients
    python bench/bench_server.py --serve-args preset=tiny rollout.decode=eager
"""

from __future__ import annotations

import argparse
import asyncio
import json
import random
import statistics
import tempfile
import time

import aiohttp

from rlloom_server.testing import ServerProcess


def body(prompt: list[int], tokens: int, seed: int | None) -> dict:
    params = {"temperature": 1.0, "max_new_tokens": tokens, "ignore_eos": True}
    if seed is not None:
        params["sampling_seed"] = seed
    return {"input_ids": prompt, "sampling_params": params}


async def send(session: aiohttp.ClientSession, url: str, request: dict) -> float:
    """One request's latency in seconds; raises unless it is answered 200 with every token."""
    start = time.perf_counter()
    async with session.post(url + "/generate", json=request) as response:
        answer = await response.json()
        if response.status != 200 or len(answer["output_ids"]) != request["sampling_params"]["max_new_tokens"]:
            raise RuntimeError(f"{response.status}: {answer}")
    return time.perf_counter() - start


async def decode_steps(session: aiohttp.ClientSession, url: str) -> int | None:
    async with session.get(url + "/get_server_info") as response:
        return (await response.json()).get("decode_steps")  # absent from servers before issue 33


async def burst(url: str, prompts: list[list[int]], tokens: int, seeded: bool) -> tuple[float, int | None]:
    """Wall seconds for every prompt sent at once (seed 1000 + i for prompt i when ``seeded``), and
    the engine's decode steps for them (None where the engine does not count them)."""
    async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=3600)) as session:
        await send(session, url, body(prompts[0], tokens, None))  # warm-up
        before = await decode_steps(session, url)
        start = time.perf_counter()
        await asyncio.gather(*(send(session, url, body(p, tokens, 1000 + i if seeded else None))
                               for i, p in enumerate(prompts)))
        wall = time.perf_counter() - start
        after = await decode_steps(session, url)
        return wall, None if before is None else after - before


async def load(url: str, prompts: list[list[int]], tokens: int, clients: int, total: int) -> dict:
    """``total`` requests from ``clients`` clients, each sending its next request when the last returns."""
    latencies: list[float] = []
    counter = iter(range(total))

    async def client(session):
        for k in counter:
            latencies.append(await send(session, url, body(prompts[k % len(prompts)], tokens, 5000 + k)))

    connector = aiohttp.TCPConnector(limit=clients)
    async with aiohttp.ClientSession(connector=connector, timeout=aiohttp.ClientTimeout(total=3600)) as session:
        await send(session, url, body(prompts[0], tokens, None))  # warm-up
        start = time.perf_counter()
        await asyncio.gather(*(client(session) for _ in range(clients)))
        wall = time.perf_counter() - start
    cuts = statistics.quantiles(latencies, n=100)
    return {"requests": total, "clients": clients, "wall_s": round(wall, 2),
            "requests_per_s": round(total / wall, 1), "p50_s": round(cuts[49], 3), "p99_s": round(cuts[98], 3)}


def median(runs: list[tuple[float, int | None]]) -> float:
    return statistics.median(wall for wall, _ in runs)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--requests", type=int, default=200)
    parser.add_argument("--max-new-tokens", type=int, default=16)
    parser.add_argument("--repeats", type=int, default=3, help="bursts of each kind (the ratio is of their medians)")
    parser.add_argument("--load-requests", type=int, default=400)
    parser.add_argument("--load-clients", type=int, default=32)
    parser.add_argument("--serve-args", nargs="*", default=["preset=tiny"])
    args = parser.parse_args()
    rng = random.Random(0)
    prompts = [[rng.randrange(5, 200) for _ in range(rng.randrange(4, 24))] for _ in range(args.requests)]
    with tempfile.TemporaryDirectory() as cache:
        server = ServerProcess(*args.serve_args, f"model.cache_dir={cache}")
        try:
            runs = {seeded: [asyncio.run(burst(server.url, prompts, args.max_new_tokens, seeded))
                             for _ in range(args.repeats)] for seeded in (False, True)}
            loaded = asyncio.run(load(server.url, prompts, args.max_new_tokens, args.load_clients, args.load_requests))
        finally:
            server.stop()
    print(json.dumps({
        "serve": args.serve_args, "requests": args.requests, "max_new_tokens": args.max_new_tokens,
        "concurrent_unseeded_s": [round(wall, 2) for wall, _ in runs[False]],
        "concurrent_distinct_seeds_s": [round(wall, 2) for wall, _ in runs[True]],
        "ratio_seeded_vs_unseeded_of_medians": round(median(runs[True]) / median(runs[False]), 2),
        "decode_steps_unseeded": [steps for _, steps in runs[False]],
        "decode_steps_distinct_seeds": [steps for _, steps in runs[True]], "load": loaded,
    }, indent=1))


if __name__ == "__main__":
    main()
