"""``Toolbox``: runs one turn's tool calls and turns each outcome into a tool message.

Every call ends in an observation the model sees, never in an exception: a malformed call, an
unknown tool, arguments that fail the tool's JSON schema, a tool that raises or runs past
``tool_timeout_s`` each give ``"error: <why>"`` and count in ``tool_errors``; an answer longer than
``max_tool_response_tokens`` keeps its head and tail around ``[… N tokens cut …]``. A turn's calls
run concurrently, at most ``max_parallel_calls`` of them (the rest are answered with an error).
Counters (per episode): ``tool_calls`` (every call the model wrote), ``tool_errors``.
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from typing import Any

import jsonschema

from rlloom.protocols import Episode, Tool
from rlloom_agentkit.config import AgentConfig
from rlloom_agentkit.hermes import ToolCall

CHARS_PER_TOKEN_BOUND = 16  # no token is longer: text beyond this many characters per kept token is cut unread


def check_tool(tool: Tool) -> None:
    """ValueError naming the tool unless its ``parameters`` are a valid JSON schema of an object."""
    try:
        jsonschema.validators.validator_for(tool.parameters).check_schema(tool.parameters)
    except jsonschema.SchemaError as error:
        raise ValueError(f"tool {tool.name}: its parameters are not a valid JSON schema: {error.message}") from None
    if tool.parameters.get("type") != "object":
        raise ValueError(f"tool {tool.name}: its parameters must be a JSON schema of type 'object'")


class Toolbox:
    """The run's tools by name (each checked with :func:`check_tool`) and the call settings of ``cfg``."""

    def __init__(self, tools: Sequence[Tool], cfg: AgentConfig) -> None:
        for tool in tools:
            check_tool(tool)
        self.tools = {tool.name: tool for tool in tools}
        self.config = cfg

    async def run(self, calls: list[ToolCall], episode: Episode) -> list[dict[str, str]]:
        """One tool message per call, in the calls' order (see the module doc)."""
        episode.count("tool_calls", len(calls))
        limit = self.config.max_parallel_calls
        answers = await asyncio.gather(*(self.answer(call, episode) for call in calls[:limit]))
        answers += [f"error: at most {limit} tool calls per turn; this one was not run"] * len(calls[limit:])
        episode.count("tool_errors", sum(answer.startswith("error: ") for answer in answers))
        return [{"role": "tool", "content": self.truncate(answer, episode.tokenizer)} for answer in answers]

    async def answer(self, call: ToolCall, episode: Episode) -> str:
        """The observation for one call."""
        if call.error is not None:
            return f"error: {call.error}"
        tool = self.tools.get(call.name)
        if tool is None:
            return f"error: no tool named {call.name!r}; the tools are {', '.join(sorted(self.tools))}"
        try:
            jsonschema.validate(call.arguments, tool.parameters)
        except jsonschema.ValidationError as error:
            return f"error: invalid arguments for {call.name}: {error.message}"
        try:
            result = await asyncio.wait_for(tool(call.arguments, episode.row), self.config.tool_timeout_s)
        except TimeoutError:
            return f"error: {call.name} did not answer within {self.config.tool_timeout_s:g} s"
        except Exception as error:  # a tool's failure is the model's observation, never the run's end
            return f"error: {call.name} failed: {type(error).__name__}: {error}"
        return str(result)

    def truncate(self, text: str, tokenizer: Any) -> str:
        """``text`` with its middle cut to keep ``max_tool_response_tokens`` tokens (head and tail)."""
        keep = self.config.max_tool_response_tokens
        bound = keep * CHARS_PER_TOKEN_BOUND
        if len(text) > 2 * bound:  # megabytes are not tokenised whole: no kept token lies this far in
            text = text[:bound] + text[-bound:]
        ids = tokenizer(text, add_special_tokens=False)["input_ids"]
        if len(ids) <= keep:
            return text
        head, tail = ids[: keep // 2], ids[len(ids) - (keep - keep // 2):]
        return f"{tokenizer.decode(head)}\n[… the middle was cut …]\n{tokenizer.decode(tail)}"
