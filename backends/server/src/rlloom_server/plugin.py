"""Entry point ``server`` (group ``rlloom``): the rollout engine ``rollout=server``, the command
``rlloom serve`` and the agent loop ``agent=gateway`` (black-box agents over OpenAI's API)."""

from __future__ import annotations

import rlloom
from rlloom import EngineSpec

from rlloom_serverkit.config import ServerRolloutConfig

from rlloom_server.config import GatewayConfig


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


@rlloom.hookimpl
def register_agent_loops(register):
    register("gateway", "rlloom_server.gateway:GatewayLoop", config=GatewayConfig)
