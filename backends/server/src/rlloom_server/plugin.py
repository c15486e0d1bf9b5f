"""Entry point ``server`` (group ``rlloom``): the rollout engine ``rollout=server`` and the command
``rlloom serve``."""

from __future__ import annotations

import rlloom
from rlloom import EngineSpec

from rlloom_serverkit.config import ServerRolloutConfig


def build_engine(cfg: ServerRolloutConfig, spec: EngineSpec):
    """``factory(cfg, spec) -> ServerRolloutEngine`` (aiohttp is imported when it is built)."""
    from rlloom_serverkit.client import ServerRolloutEngine

    return ServerRolloutEngine(cfg, spec)


def serve_command(parser):
    """serve a rollout engine over HTTP (SGLang- and OpenAI-compatible APIs)"""
    from rlloom_server import serve

    serve.add_arguments(parser)
    return serve.run


@rlloom.hookimpl
def register_rollout_engines(register):
    register("server", build_engine, config=ServerRolloutConfig)


@rlloom.hookimpl
def register_commands(register):
    register("serve", serve_command)
