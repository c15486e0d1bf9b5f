"""``rlloom serve``: a rollout engine chosen by config (``rollout=hf``, ``rollout=vllm``, …) served
over HTTP (:mod:`rlloom_server.app`) until SIGINT or SIGTERM.

The engine and model come from the same Hydra overrides as ``rlloom train`` (``rollout=…``,
``model=…``, ``trainer.seed``, ``trainer.device``, ``preset=…``); a bad override is the same
one-paragraph error with exit status 2. Once listening it prints one line,
``rlloom serve: <engine> (<model path>) on http://HOST:PORT`` (``--port 0`` picks a free port).
"""

from __future__ import annotations

import argparse
import asyncio
import signal
import sys

from rlloom.config import compose_config
from rlloom.controller.roles import build_role
from rlloom.errors import ConfigError, RoleStartError
from rlloom.plugins.registry import get_registry
from rlloom.types import EngineSpec, RoleSpec

from rlloom_server.config import ServeConfig


def add_arguments(parser: argparse.ArgumentParser) -> None:
    defaults = ServeConfig()
    parser.description = ("Serve a rollout engine over HTTP (SGLang-compatible /generate, OpenAI-compatible /v1, "
                          "weight updates, release/resume memory, health). Overrides are the same as for rlloom train.")
    parser.add_argument("overrides", nargs="*", help="Hydra overrides (rollout=hf, model=tiny, preset=tiny, ...)")
    parser.add_argument("--host", default=defaults.host)
    parser.add_argument("--port", type=int, default=defaults.port, help="0 picks a free port")
    parser.add_argument("--max-concurrency", type=int, default=defaults.max_concurrency,
                        help="generate requests served at once; more get 503")
    parser.add_argument("--request-timeout-s", type=float, default=defaults.request_timeout_s)
    parser.add_argument("--max-batch-prompts", type=int, default=defaults.max_batch_prompts)
    parser.add_argument("--context-length", type=_positive, default=defaults.context_length,
                        help="longest prompt + response in tokens (default: the model's max_position_embeddings)")
    parser.add_argument("--max-n", type=_positive, default=defaults.max_n,
                        help=f"most samples per request (default {defaults.max_n})")
    parser.add_argument("--max-new-tokens-limit", type=_positive, default=defaults.max_new_tokens_limit,
                        help="most max_new_tokens per request (default: the context length)")
    parser.add_argument("--max-total-tokens", type=_positive, default=defaults.max_total_tokens,
                        help=f"tokens in flight, n x (prompt + max_new_tokens) over the requests served; "
                             f"more wait, a larger request gets 413 (default {defaults.max_total_tokens})")
    parser.add_argument("--api-key", default=defaults.api_key,
                        help="every route but /health then needs the header 'Authorization: Bearer <key>'")
    parser.add_argument("--weight-version", default=defaults.weight_version,
                        help="the version of the starting weights (/get_weight_version, meta_info.weight_version)")


def _positive(text: str) -> int:
    value = int(text)
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be >= 1, got {value}")
    return value


def run(args: argparse.Namespace) -> int:
    """Build the engine the overrides name and serve it until a stop signal; returns 0."""
    from rlloom_server.app import RolloutServer
    from rlloom_server.door import server_limits

    cfg = ServeConfig(host=args.host, port=args.port, max_concurrency=args.max_concurrency,
                      request_timeout_s=args.request_timeout_s, max_batch_prompts=args.max_batch_prompts,
                      context_length=args.context_length, max_n=args.max_n,
                      max_new_tokens_limit=args.max_new_tokens_limit, max_total_tokens=args.max_total_tokens,
                      api_key=args.api_key, weight_version=args.weight_version)
    resolved = compose_config(args.overrides)
    registry, choices, sections = get_registry(), resolved.choices, resolved.sections
    trainer = sections["trainer"]
    try:
        model_path = registry.build("model", choices["model"], sections["model"])
        engine = build_role(RoleSpec("rollout", "rollout", choices["rollout"], sections["rollout"],
                                     EngineSpec(model_path, "rollout", trainer.seed, 0, trainer.device)), registry)
    except Exception as error:  # noqa: BLE001 - one paragraph, exit 2 (rlloom.cli)
        raise RoleStartError("rollout", f"rollout={choices['rollout']}", error) from error
    try:
        limits = server_limits(cfg, model_path, engine)
    except ValueError as error:
        engine.close()
        raise ConfigError(str(error)) from None
    server = RolloutServer(engine, cfg, model_path, choices["rollout"], limits)
    asyncio.run(_serve(server, cfg))
    return 0


async def _serve(server, cfg: ServeConfig) -> None:
    from aiohttp import web

    runner = web.AppRunner(server.app(), access_log=None, handler_cancellation=True)  # a disconnect cancels
    await runner.setup()
    site = web.TCPSite(runner, cfg.host, cfg.port)
    await site.start()
    port = runner.addresses[0][1]
    print(f"rlloom serve: {server.engine_name} ({server.model_path}) on http://{cfg.host}:{port}", flush=True)
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, stop.set)
    try:
        await stop.wait()
    finally:
        await runner.cleanup()
        print("rlloom serve: stopped", file=sys.stderr, flush=True)
