"""The multi-turn agent loops: ``agent=tools`` and ``agent=environment``."""

from __future__ import annotations

import asyncio
from typing import Any

from rlloom_agentkit.settings import build_with_settings
from rlloom.plugins.registry import Registry
from rlloom.protocols import Episode
from rlloom.types import Turn
from rlloom_agentkit.hermes import ToolCall, parse_tool_calls
from rlloom_agentkit.toolbox import Toolbox
from rlloom_agents.config import EnvironmentLoopConfig, ToolLoopConfig


class ToolLoop:
    """``agent=tools``: each turn, the model answers or calls tools (``<tool_call>`` blocks,
    :mod:`rlloom_agentkit.hermes`); calls are run by the :class:`~rlloom_agentkit.toolbox.Toolbox` and
    their results appended as tool messages, and the model takes the next turn.

    Ends with ``answer`` (a turn without a tool call), ``max_turns`` (the last allowed turn still
    called a tool), or ``length`` (the budget ran out, or a turn without a tool call ran out of
    ``sampling.max_new_tokens``: its answer is cut). Counters ``tool_calls``
    and ``tool_errors`` (every episode reports them, 0 included). Each tool is built once, with its
    ``agent.tool_settings`` over its config (:func:`rlloom_agentkit.settings.build_with_settings`)."""

    def __init__(self, cfg: ToolLoopConfig, registry: Registry) -> None:
        self.config = cfg
        self.tools = tuple(build_with_settings(registry, "tool", name, cfg.tool_settings.get(name, {}),
                                               f"agent.tool_settings.{name}") for name in cfg.tools)
        self.toolbox = Toolbox(self.tools, cfg)

    def calls(self, turn: Turn) -> list[ToolCall]:
        """The tool calls a turn makes: its ``<tool_call>`` blocks
        (:func:`~rlloom_agentkit.hermes.parse_tool_calls`). A subclass may decide otherwise
        (``bench/bench_agent.py``'s loop calls a tool every turn)."""
        return parse_tool_calls(turn.text)

    async def run(self, episode: Episode) -> None:
        episode.count("tool_calls", 0)
        episode.count("tool_errors", 0)
        for _ in range(self.config.max_turns):
            turn = await episode.assistant_turn()
            if turn is None:
                return  # the budget is spent: the episode finished itself with "length"
            calls = self.calls(turn)
            if not calls:
                episode.finish("answer" if turn.finish_reason == "stop" else "length")
                return
            if not episode.add_messages(await self.toolbox.run(calls, episode)):
                return
        episode.finish("max_turns")


class EnvironmentLoop:
    """``agent=environment``: a fresh environment per episode (``agent.environment``); its first
    observation, if any, joins the prompt as a user message; each turn's text is its action, and its
    observation comes back as a user message until it says done. The episode's reward is the sum of
    the steps' rewards (part ``steps``: how many the environment took). Ends with ``done``,
    ``max_turns`` or ``length``. Environment calls run on a worker thread, so a slow one blocks no
    other episode."""

    tools: tuple = ()

    def __init__(self, cfg: EnvironmentLoopConfig, registry: Registry) -> None:
        self.config = cfg
        self.make_environment = registry.get("environment", cfg.environment).factory

    async def run(self, episode: Episode) -> None:
        environment: Any = self.make_environment()
        first = await asyncio.to_thread(environment.reset, episode.row)
        if first is not None:
            episode.add_messages([{"role": "user", "content": first}])
        total, steps = 0.0, 0
        for _ in range(self.config.max_turns):
            turn = await episode.assistant_turn()
            if turn is None:
                break
            result = await asyncio.to_thread(environment.step, turn.text)
            total, steps = total + result.reward, steps + 1
            if result.done:
                episode.finish("done", total, {"steps": float(steps)})
                return
            if result.observation is not None and not episode.add_messages(
                    [{"role": "user", "content": result.observation}]):
                break
        episode.finish("max_turns" if steps == self.config.max_turns else "length", total, {"steps": float(steps)})
