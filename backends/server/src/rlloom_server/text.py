"""Text for the HTTP dialects: the served model's tokenizer (prompts as text, chat templates, answers
as text), stop strings cut after decoding, and the request checks every dialect shares.

The engines are token in, token out, and know stop *ids* only (``SamplingParams.stop_token_ids``).
A stop *string* is applied after the engine answers: the response is decoded, and where a stop
string first occurs (the earliest start over all of them) the response ends: its text stops
before the string, its tokens and log-probs at the first token whose prefix's text contains the
string (so the tokens that spell it are kept, as SGLang keeps them), and it finished by ``stop``.
The engine generated on past the string; only the answer is cut.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from rlloom import Completion
from rlloom_agentkit.template import render_chat
from rlloom_serverkit.schema import SchemaError

# sampling settings the engines cannot honour, each with the one value that means "off": a
# request that sends it with that value is served, any other value gets 400 naming it
NEUTRAL_SAMPLING = {"min_p": 0.0, "frequency_penalty": 0.0, "presence_penalty": 0.0, "repetition_penalty": 1.0,
                    "min_new_tokens": 0}


def flag(body: dict, key: str, where: str, default: bool = False) -> bool:
    """``body[key]`` when it is a JSON boolean (``default`` when absent or null); SchemaError naming
    ``where`` for anything else (``"false"``, 0, ...)."""
    value = body.get(key)
    if value is None:
        return default
    if not isinstance(value, bool):
        raise SchemaError(f"{where} must be true or false, got {value!r}")
    return value


def refuse_unless_neutral(values: dict, neutral: dict, where: str) -> None:
    """SchemaError naming ``where.key`` for the first key of ``neutral`` that ``values`` sets to
    anything but its neutral value (None counts as unset)."""
    for key, off in neutral.items():
        value = values.get(key)
        if value is not None and value != off:
            raise SchemaError(f"{where}{key}={value!r} is not supported by this server (only {off!r})")


def stop_strings(value: Any, where: str) -> tuple[str, ...]:
    """A ``stop`` field (a string, a list of strings, or null) as a tuple of non-empty strings."""
    if value is None:
        return ()
    stops = [value] if isinstance(value, str) else value
    if not isinstance(stops, list) or not all(isinstance(s, str) and s for s in stops):
        raise SchemaError(f"{where} must be a non-empty string or a list of them, got {value!r}")
    return tuple(stops)


@dataclass(frozen=True)
class Sample:
    """One response as the dialects answer it: ``tokens``, their ``log_probs`` (None when the engine
    gave none), ``text``, ``finish`` (``"stop"``, ``"length"`` or ``"abort"``) and what ``matched`` a stop
    (a stop string, else the final token id when it stopped, else None)."""

    tokens: list[int]
    log_probs: list[float] | None
    text: str
    finish: str
    matched: str | int | None


class ServedTokenizer:
    """A Hugging Face ``tokenizer`` as the dialects use it. ``vocab_size``: ids the model can produce;
    ``context_len``: its longest sequence (None: unknown). :meth:`load` reads a model folder's."""

    def __init__(self, tokenizer: Any, vocab_size: int, context_len: int | None = None) -> None:
        self.tokenizer, self.vocab_size, self.context_len = tokenizer, vocab_size, context_len

    @classmethod
    def load(cls, model_path: str) -> ServedTokenizer:
        """The tokenizer of the model folder ``model_path``; ``vocab_size`` is its config's (at least
        the tokenizer's), ``context_len`` its ``max_position_embeddings`` (None when it has none)."""
        from transformers import AutoConfig, AutoTokenizer

        tokenizer = AutoTokenizer.from_pretrained(model_path)
        config = AutoConfig.from_pretrained(model_path)
        return cls(tokenizer, max(int(getattr(config, "vocab_size", 0) or 0), len(tokenizer)),
                   getattr(config, "max_position_embeddings", None))

    def encode(self, text: str, add_special_tokens: bool = True) -> list[int]:
        return list(self.tokenizer.encode(text, add_special_tokens=add_special_tokens))

    def decode(self, ids: list[int], skip_special_tokens: bool = True) -> str:
        return self.tokenizer.decode(ids, skip_special_tokens=skip_special_tokens)

    def token_ids(self, value: Any, where: str) -> list[int]:
        """``value`` checked as a non-empty list of ids below ``vocab_size``; SchemaError naming ``where``."""
        if not isinstance(value, list) or not value or not all(
                isinstance(t, int) and not isinstance(t, bool) and 0 <= t < self.vocab_size for t in value):
            raise SchemaError(f"{where} must be a non-empty list of token ids in [0, {self.vocab_size})")
        return value

    def chat_prompt(self, messages: Any, tools: Any = None) -> list[int]:
        """The token ids of ``messages`` (OpenAI's ``[{"role", "content"}, ...]``; a content may be
        a list of ``{"type": "text", "text"}`` parts, joined; other fields, e.g. an assistant's
        ``tool_calls``, are not rendered) and of ``tools`` (OpenAI's function descriptions,
        :func:`rlloom_agentkit.template.render_chat`) by the tokenizer's chat template with the
        generation prompt appended; SchemaError naming the message or tool at fault."""
        if not isinstance(messages, list) or not messages:
            raise SchemaError("messages must be a non-empty list of {role, content} objects")
        plain = [{"role": _role(m, i), "content": _content(m, i)} for i, m in enumerate(messages)]
        if self.tokenizer.chat_template is None:
            raise SchemaError("the served tokenizer has no chat template: use /v1/completions")
        return self.encode(render_chat(self.tokenizer, plain, function_tools(tools)), add_special_tokens=False)

    def samples(self, answer: Completion, stops: tuple[str, ...], skip_special_tokens: bool = True) -> list[Sample]:
        """The responses of ``answer`` as :class:`Sample` s, each cut at its first stop string (module doc)."""
        result = []
        for j, tokens in enumerate(answer.token_ids):
            log_probs = None if answer.log_probs is None else answer.log_probs[j]
            text = self.decode(tokens, skip_special_tokens)
            cut = self._cut(tokens, stops, skip_special_tokens) if any(s in text for s in stops) else None
            if cut is not None:
                k, text, matched = cut
                result.append(Sample(tokens[:k], None if log_probs is None else log_probs[:k], text, "stop", matched))
                continue
            reason = answer.finish_reasons[j]
            result.append(Sample(tokens, log_probs, text, reason, tokens[-1] if reason == "stop" and tokens else None))
        return result

    def _cut(self, tokens: list[int], stops: tuple[str, ...], skip_special_tokens: bool) -> tuple[int, str, str]:
        """``(k, text, stop)``: the fewest tokens ``k`` whose text holds a stop string, that text up
        to the earliest such string, and the string."""
        for k in range(1, len(tokens) + 1):
            text = self.decode(tokens[:k], skip_special_tokens)
            hits = [(text.find(s), i) for i, s in enumerate(stops) if s in text]
            if hits:  # the whole response's text holds one, so some k <= len(tokens) gets here
                start, i = min(hits)
                return k, text[:start], stops[i]
        raise ValueError(f"none of the stop strings {stops} is in the response's text")


def _role(message: Any, i: int) -> str:
    if not isinstance(message, dict) or not isinstance(message.get("role"), str):
        raise SchemaError(f"messages[{i}] must be an object with a string role")
    return message["role"]


def _content(message: dict, i: int) -> str:
    content = message.get("content")
    if content is None or isinstance(content, str):
        return content or ""
    if isinstance(content, list) and all(isinstance(p, dict) and p.get("type") == "text"
                                         and isinstance(p.get("text"), str) for p in content):
        return "".join(p["text"] for p in content)
    raise SchemaError(f"messages[{i}].content must be a string or a list of text parts")


def function_tools(tools: Any) -> list[dict]:
    """A request's ``tools`` (null, or a list of ``{"type": "function", "function": {"name", ...}}``)
    checked; SchemaError naming the one at fault."""
    if tools is None:
        return []
    if not isinstance(tools, list):
        raise SchemaError("tools must be a list of {type: function, function: {name, ...}} objects")
    for i, tool in enumerate(tools):
        function = tool.get("function") if isinstance(tool, dict) else None
        if not isinstance(function, dict) or tool.get("type") != "function" or not isinstance(
                function.get("name"), str):
            raise SchemaError(f"tools[{i}] must be {{type: function, function: {{name, description, parameters}}}}")
    return tools
