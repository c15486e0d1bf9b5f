"""The settings agent loops share (torch-free: composing a config stays fast)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, ClassVar

from rlloom.config.limits import Limited


@dataclass
class SingleTurnConfig:
    """``agent=single_turn`` (the default): one sampled answer per prompt, through the rollout engine's
    batch call; no agent runner is built."""


@dataclass
class AgentConfig(Limited):
    """What every multi-turn loop takes.

    - ``max_turns``: assistant turns per trajectory (the episode ends with ``max_turns`` after the last);
    - ``max_response_tokens``: the trajectory's response budget, every turn's sampled tokens and every
      inserted (tool, user, template) token together; each turn samples at most
      ``sampling.max_new_tokens`` of it;
    - ``tools``: names of registered tools (``register_tools``) described to the model;
    - ``tool_settings``: tool name -> ``{key: value}`` over that tool's registered config's defaults
      (``+agent.tool_settings.python.timeout_s=3``); an unknown key, a wrong type or a tool not in
      ``tools`` is a config error naming ``agent.tool_settings.<tool>.<key>``
      (:mod:`rlloom_agentkit.settings`);
    - ``max_parallel_calls``: tool calls of one turn run at once (more in one turn: the rest answered
      with an error observation);
    - ``max_tool_response_tokens``: a longer observation keeps its head and tail, the middle cut;
    - ``tool_timeout_s``: a call running longer is abandoned and answered with an error observation.
    """

    section: ClassVar[str] = "agent"
    limits: ClassVar[dict[str, str]] = {
        "max_turns": ">= 1", "max_response_tokens": ">= 1", "max_parallel_calls": ">= 1",
        "max_tool_response_tokens": ">= 8", "tool_timeout_s": "in (0, inf)",
    }

    max_turns: int = 4
    max_response_tokens: int = 256
    tools: list[str] = field(default_factory=list)
    tool_settings: dict[str, dict[str, Any]] = field(default_factory=dict)
    max_parallel_calls: int = 4
    max_tool_response_tokens: int = 128
    tool_timeout_s: float = 10.0

    def check_installed(self, registry: Any) -> None:
        """Contract: :class:`rlloom.protocols.ChecksInstalled`: ``tools`` are registered tools and
        ``tool_settings`` fit them (:mod:`rlloom_agentkit.settings`)."""
        from rlloom_agentkit.settings import check_names, check_tool_settings

        check_names(registry, "tool", list(self.tools), f"{self.section}.tools")
        check_tool_settings(registry, list(self.tools), self.tool_settings, f"{self.section}.tool_settings")
