"""The tokens a chat template puts around turns, computed once against a fixed conversation, so that
an episode appends messages without ever re-tokenising what the policy sampled.

For messages ``M`` added after an assistant turn, the template renders ``base + M`` (``base``: a fixed
user message and assistant reply) with the generation prompt; its ids start with ``base``'s ids up to
the token that closes the assistant turn (the last stop id in them, e.g. ``<|im_end|>``), and what
follows is exactly what the template puts after any assistant turn followed by ``M``: the turn's tail
(``"\\n"``), ``M`` with its role headers, and the next generation prompt. A turn that ended without
the closing token (another stop id) gets the closing token first. The prompt itself, and messages
added before the first sampled token, are rendered whole (nothing sampled is in them).

A template that renders ``base`` differently once messages follow it (one that rewrites earlier
turns, e.g. drops their reasoning) is refused when the template is built: the fixed-prefix rule
cannot hold for it.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

from rlloom.protocols import Tool

BASE = [{"role": "user", "content": "1"}, {"role": "assistant", "content": "2"}]
PROBES = ([{"role": "tool", "content": "3"}], [{"role": "user", "content": "3"}])


class TemplateError(ValueError):
    """The model's chat template cannot be extended turn by turn."""


def tool_schema(tool: Tool) -> dict[str, Any]:
    """A tool as the OpenAI-style function description chat templates take."""
    return {"type": "function",
            "function": {"name": tool.name, "description": tool.description, "parameters": tool.parameters}}


def hermes_system_prompt(schemas: Sequence[dict[str, Any]]) -> str:
    """The Hermes / Qwen tool instructions, for templates that ignore ``tools``: the function
    descriptions (:func:`tool_schema`'s shape) in ``<tools>`` and the ``<tool_call>`` format the model
    must answer in (:mod:`rlloom_agentkit.hermes`)."""
    listed = "\n".join(json.dumps(schema) for schema in schemas)
    return ("You may call tools. The tools are described in JSON schema inside <tools></tools>:\n"
            f"<tools>\n{listed}\n</tools>\n"
            "To call a tool, answer with a JSON object holding its name and arguments inside "
            "<tool_call></tool_call> tags:\n"
            '<tool_call>\n{"name": <tool name>, "arguments": <arguments object>}\n</tool_call>\n'
            "The result comes back in a tool message. Give your final answer without a tool call.")


def render_chat(tokenizer: Any, messages: list[dict[str, Any]], schemas: Sequence[dict[str, Any]] = (),
                generation_prompt: bool = True) -> str:
    """``messages`` through ``tokenizer``'s chat template; the function descriptions ``schemas``
    through the template's own tool format when it has one (the text changes with them), else as a
    Hermes system prompt merged into the first system message (:func:`with_system`)."""
    plain = tokenizer.apply_chat_template(messages, tokenize=False, add_generation_prompt=generation_prompt)
    if not schemas:
        return plain
    text = tokenizer.apply_chat_template(messages, tools=list(schemas), tokenize=False,
                                         add_generation_prompt=generation_prompt)
    if text != plain:
        return text
    return tokenizer.apply_chat_template(with_system(messages, hermes_system_prompt(schemas)), tokenize=False,
                                         add_generation_prompt=generation_prompt)


class TurnTemplate:
    """The model's chat template, turn by turn (see the module doc). ``stop_ids``: the ids that end
    a sampled turn (the model's stop ids)."""

    def __init__(self, tokenizer: Any, stop_ids: Sequence[int]) -> None:
        self.tokenizer = tokenizer
        if getattr(tokenizer, "chat_template", None) is None:
            raise TemplateError("agent loops need a model whose tokenizer has a chat template")
        base_ids = self.ids(self.render(BASE, generation_prompt=False))
        closing = [i for i, token in enumerate(base_ids) if token in set(stop_ids)]
        if not closing:
            raise TemplateError("the chat template closes an assistant turn with none of the model's stop "
                                f"tokens {list(stop_ids)}: a sampled turn's end cannot be found")
        self.closing_id = base_ids[closing[-1]]
        self.prefix = base_ids[: closing[-1] + 1]
        for probe in PROBES:
            self.after_turn(probe, ended_with_closing=True)

    def ids(self, text: str) -> list[int]:
        return self.tokenizer(text, add_special_tokens=False)["input_ids"]

    def render(self, messages: list[dict[str, Any]], generation_prompt: bool = True,
               tools: Sequence[Tool] = ()) -> str:
        """``messages`` and ``tools`` through the chat template (:func:`render_chat`)."""
        return render_chat(self.tokenizer, messages, [tool_schema(tool) for tool in tools], generation_prompt)

    def prompt_ids(self, prompt: list[dict[str, Any]] | str, tools: Sequence[Tool] = ()) -> list[int]:
        """The ids of a dataset row's prompt (chat messages, or a string taken as it is with the tool
        instructions in front), ready for the first assistant turn."""
        if isinstance(prompt, str):
            schemas = [tool_schema(tool) for tool in tools]
            return self.ids((hermes_system_prompt(schemas) + "\n\n" if tools else "") + prompt)
        return self.ids(self.render(prompt, tools=tools))

    def after_turn(self, messages: list[dict[str, Any]], ended_with_closing: bool) -> list[int]:
        """The ids that follow an assistant turn when ``messages`` come next, up to the next generation
        prompt (see the module doc). TemplateError when the template does not extend ``BASE``."""
        full = self.ids(self.render(BASE + messages))
        if full[: len(self.prefix)] != self.prefix:
            raise TemplateError("the chat template renders earlier turns differently once "
                                f"{[m['role'] for m in messages]} messages follow; agent loops need a "
                                "template that only appends")
        return ([] if ended_with_closing else [self.closing_id]) + full[len(self.prefix):]


def with_system(messages: list[dict[str, Any]], text: str) -> list[dict[str, Any]]:
    """``messages`` with ``text`` in front of the first system message's content (one added if none)."""
    if messages and messages[0].get("role") == "system":
        return [{**messages[0], "content": f"{text}\n\n{messages[0]['content']}"}, *messages[1:]]
    return [{"role": "system", "content": text}, *messages]
