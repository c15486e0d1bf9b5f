"""Tool calls in the Hermes / Qwen format: ``<tool_call>{"name": ..., "arguments": {...}}</tool_call>``
blocks in an assistant turn's text (the format :func:`rlloom_agentkit.template.hermes_system_prompt`
asks for, and Qwen's and Hermes' own templates describe)."""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from typing import Any

CALL = re.compile(r"<tool_call>(.*?)</tool_call>", re.DOTALL)
UNCLOSED = re.compile(r"<tool_call>(?!.*</tool_call>)", re.DOTALL)


@dataclass(frozen=True)
class ToolCall:
    """One parsed call: the tool's ``name`` and its ``arguments``; ``error`` (and no name) when the
    block was not a call (bad JSON, no name, arguments not an object)."""

    name: str | None
    arguments: dict[str, Any] = field(default_factory=dict)
    error: str | None = None


def parse_tool_calls(text: str) -> list[ToolCall]:
    """Every ``<tool_call>`` block of ``text``, in order (an opened block never closed is a malformed
    call); an empty list when the turn calls no tool."""
    calls = [parse_one(block.strip()) for block in CALL.findall(text)]
    if UNCLOSED.search(CALL.sub("", text)):
        calls.append(ToolCall(None, error="a <tool_call> block is not closed with </tool_call>"))
    return calls


def parse_one(block: str) -> ToolCall:
    """One block's JSON as a :class:`ToolCall` (``arguments`` may also be a JSON string of an object)."""
    try:
        payload = json.loads(block)
    except json.JSONDecodeError as error:
        return ToolCall(None, error=f"the tool call is not valid JSON ({error.msg} at character {error.pos})")
    if not isinstance(payload, dict) or not isinstance(payload.get("name"), str):
        return ToolCall(None, error='a tool call needs a JSON object with a string "name"')
    arguments = payload.get("arguments", {})
    if isinstance(arguments, str):
        try:
            arguments = json.loads(arguments)
        except json.JSONDecodeError:
            return ToolCall(payload["name"], error="the tool call's arguments are not a JSON object")
    if not isinstance(arguments, dict):
        return ToolCall(payload["name"], error="the tool call's arguments are not a JSON object")
    return ToolCall(payload["name"], arguments)
