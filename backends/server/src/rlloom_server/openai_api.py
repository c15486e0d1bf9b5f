"""OpenAI's API over the server's token-in, token-out core: ``GET /v1/models``, ``POST
/v1/completions`` and ``POST /v1/chat/completions``, in OpenAI's request and answer shapes.

A request becomes a ``/generate`` request (:func:`rlloom_serverkit.schema.parse_generate`), so it is
batched, limited and timed out as those are, and samples what ``/generate`` samples for the same
prompt ids, seed and settings: ``seed`` is ``sampling_seed``, prompt ``i`` of a request has prompt
index ``i``, choice ``i * n + j`` is its sample ``j``.

- ``/v1/completions``: ``prompt`` a string, a list of strings, a list of token ids or a list of
  such lists; ``max_tokens``, ``temperature``, ``top_p``, ``n``, ``seed``, ``stop`` (strings cut
  after decoding, :mod:`rlloom_server.text`), ``logprobs`` (0 only: the sampled tokens' log-probs,
  no alternatives), ``stream``, ``stream_options.include_usage``.
- ``/v1/chat/completions``: ``messages`` rendered by the served tokenizer's chat template with the
  generation prompt, with ``tools`` (function descriptions) through the template's tool format, or
  as Hermes tool instructions where it has none (:func:`rlloom_agentkit.template.render_chat`);
  ``tool_choice`` (``"auto"`` only), ``max_tokens`` / ``max_completion_tokens``, ``temperature``,
  ``top_p``, ``n``, ``seed``, ``stop``, ``logprobs`` (true: the sampled tokens' log-probs),
  ``top_logprobs`` (0 only), ``stream``, ``stream_options.include_usage``. With ``tools``, an answer
  holding Hermes ``<tool_call>`` blocks (:func:`rlloom_agentkit.hermes.parse_tool_calls`, every
  block well-formed) also carries them as ``tool_calls`` (finish reason ``tool_calls`` when it
  stopped); its ``content`` stays the whole text, so sending the message back renders it as sampled.
- Both: ``max_tokens`` left out is ``/generate``'s default; ``model`` is not checked (the server
  serves one model, named in ``/v1/models``); the extensions ``top_k``, ``ignore_eos`` and
  ``return_token_ids`` (vLLM's: every choice carries ``token_ids`` and ``prompt_token_ids``);
  ``presence_penalty`` / ``frequency_penalty`` other than 0, ``logit_bias``, ``echo``, ``suffix``,
  ``best_of`` other than ``n`` and any other field get 400 naming the field.
- Streaming: the engines answer whole completions, so a stream is one chunk per choice holding
  its whole text (and finish reason), then a usage chunk when ``stream_options.include_usage``,
  then ``data: [DONE]``.
"""

from __future__ import annotations

import json
import time
import uuid
from dataclasses import dataclass
from typing import Any, ClassVar

from aiohttp import web
from rlloom import Completion
from rlloom_agentkit.hermes import parse_tool_calls
from rlloom_serverkit.schema import GenerateRequest, SchemaError, parse_generate

from rlloom_server.sse import send_events
from rlloom_server.text import Sample, ServedTokenizer, flag, refuse_unless_neutral, stop_strings

COMMON_KEYS = frozenset({"model", "max_tokens", "temperature", "top_p", "n", "seed", "stop", "logprobs", "stream",
                         "stream_options", "user", "presence_penalty", "frequency_penalty", "logit_bias", "top_k",
                         "ignore_eos", "return_token_ids"})
NEUTRAL = {"presence_penalty": 0.0, "frequency_penalty": 0.0, "logit_bias": {}, "echo": False, "suffix": ""}
RENAMED = {"input_ids": "prompt", "sampling_params.max_new_tokens": "max_tokens",
           "sampling_params.sampling_seed": "seed", "sampling_params.": ""}


@dataclass(frozen=True)
class Extras:
    """What an OpenAI answer needs beyond the parsed request."""

    id: str
    model: str
    stops: tuple[str, ...]
    log_probs: bool
    stream: bool
    include_usage: bool
    token_ids: bool
    tools: bool = False


class _Dialect:
    """What completions and chat completions share; subclasses name their fields and shapes."""

    keys: ClassVar[frozenset]
    prefix: ClassVar[str]

    def __init__(self, tokenizer: ServedTokenizer, model: str) -> None:
        self.tokenizer, self.model = tokenizer, model

    def parse(self, body: Any) -> tuple[GenerateRequest, Extras]:
        """The ``/generate`` request for ``body`` and the answer's :class:`Extras`; SchemaError naming the field."""
        if not isinstance(body, dict):
            raise SchemaError("the body must be a JSON object")
        unknown = sorted(set(body) - self.keys)
        if unknown:
            raise SchemaError(f"unknown or unsupported field(s) {unknown}; supported: {sorted(self.keys)}")
        refuse_unless_neutral(body, NEUTRAL, "")
        if body.get("best_of") not in (None, body.get("n", 1)):
            raise SchemaError(f"best_of={body['best_of']!r} is not supported by this server (only n)")
        options = body.get("stream_options") or {}
        if not isinstance(options, dict):
            raise SchemaError("stream_options must be an object")
        params = {"n": body.get("n"), "temperature": body.get("temperature"), "top_p": body.get("top_p"),
                  "top_k": body.get("top_k"), "max_new_tokens": self._max_tokens(body),
                  "ignore_eos": body.get("ignore_eos"), "sampling_seed": body.get("seed")}
        log_probs = self._log_probs(body)
        try:
            parsed = parse_generate({"input_ids": self._prompts(body), "return_logprob": log_probs,
                                     "sampling_params": {k: v for k, v in params.items() if v is not None}})
        except SchemaError as error:
            raise SchemaError(_renamed(str(error))) from None
        return parsed, Extras(f"{self.prefix}-{uuid.uuid4().hex}", self.model,
                              stop_strings(body.get("stop"), "stop"), log_probs, flag(body, "stream", "stream"),
                              flag(options, "include_usage", "stream_options.include_usage"),
                              flag(body, "return_token_ids", "return_token_ids"), bool(body.get("tools")))

    def _max_tokens(self, body: dict) -> Any:
        return body.get("max_tokens")

    async def answer(self, request: web.Request, parsed: GenerateRequest, answers: list[Completion],
                     extras: Extras) -> web.StreamResponse:
        """The answer object, or with ``stream`` its chunks as server-sent events (module doc)."""
        choices, completion_tokens = [], 0
        for prompt, answer in zip(parsed.prompts, answers):
            for sample in self.tokenizer.samples(answer, extras.stops):
                choice = self._choice(len(choices), sample, extras, streamed=extras.stream)
                if extras.token_ids:
                    choice.update(token_ids=sample.tokens, prompt_token_ids=prompt)
                choices.append(choice)
                completion_tokens += len(sample.tokens)
        prompt_tokens = sum(len(p) for p in parsed.prompts)
        usage = {"prompt_tokens": prompt_tokens, "completion_tokens": completion_tokens,
                 "total_tokens": prompt_tokens + completion_tokens}
        head = {"id": extras.id, "object": self.object(extras.stream), "created": int(time.time()),
                "model": extras.model}
        if not extras.stream:
            return web.json_response({**head, "choices": choices, "usage": usage})
        chunks = [{**head, "choices": [choice]} for choice in choices]
        if extras.include_usage:
            chunks.append({**head, "choices": [], "usage": usage})
        return await send_events(request, chunks)

    def _token_texts(self, tokens: list[int]) -> list[str]:
        return [self.tokenizer.decode([t], skip_special_tokens=False) for t in tokens]


class CompletionsDialect(_Dialect):
    """``POST /v1/completions`` (module doc)."""

    keys = COMMON_KEYS | {"prompt", "echo", "suffix", "best_of"}
    prefix = "cmpl"

    @staticmethod
    def object(_streamed: bool) -> str:
        return "text_completion"

    def _prompts(self, body: dict) -> list[list[int]]:
        prompt = body.get("prompt")
        if isinstance(prompt, str):
            return [self.tokenizer.encode(prompt)]
        if isinstance(prompt, list) and prompt and all(isinstance(p, str) for p in prompt):
            return [self.tokenizer.encode(p) for p in prompt]
        if isinstance(prompt, list) and prompt and all(isinstance(p, list) for p in prompt):
            return [self.tokenizer.token_ids(p, f"prompt[{i}]") for i, p in enumerate(prompt)]
        return [self.tokenizer.token_ids(prompt, "prompt")]

    @staticmethod
    def _log_probs(body: dict) -> bool:
        value = body.get("logprobs")
        if value is not None and (isinstance(value, bool) or not isinstance(value, int) or value != 0):
            raise SchemaError(f"logprobs={value!r} is not supported: the engines give the sampled tokens' "
                              "log-probs only (logprobs=0), no alternatives")
        return value is not None

    def _choice(self, index: int, sample: Sample, extras: Extras, streamed: bool) -> dict:
        log_probs = None
        if extras.log_probs and sample.log_probs is not None:
            texts = self._token_texts(sample.tokens)
            offsets = [sum(len(t) for t in texts[:k]) for k in range(len(texts))]
            log_probs = {"tokens": texts, "token_logprobs": sample.log_probs, "top_logprobs": None,
                         "text_offset": offsets}
        return {"index": index, "text": sample.text, "logprobs": log_probs, "finish_reason": sample.finish}


class ChatDialect(_Dialect):
    """``POST /v1/chat/completions`` (module doc)."""

    keys = COMMON_KEYS | {"messages", "max_completion_tokens", "top_logprobs", "tools", "tool_choice"}
    prefix = "chatcmpl"

    @staticmethod
    def object(streamed: bool) -> str:
        return "chat.completion.chunk" if streamed else "chat.completion"

    def _prompts(self, body: dict) -> list[list[int]]:
        refuse_unless_neutral(body, {"tool_choice": "auto"}, "")
        return [self.tokenizer.chat_prompt(body.get("messages"), body.get("tools"))]

    def _max_tokens(self, body: dict) -> Any:
        return body.get("max_completion_tokens", body.get("max_tokens"))

    @staticmethod
    def _log_probs(body: dict) -> bool:
        if body.get("top_logprobs") not in (None, 0):
            raise SchemaError(f"top_logprobs={body['top_logprobs']!r} is not supported: the engines give the "
                              "sampled tokens' log-probs only (top_logprobs=0)")
        return flag(body, "logprobs", "logprobs")

    def _choice(self, index: int, sample: Sample, extras: Extras, streamed: bool) -> dict:
        log_probs = None
        if extras.log_probs and sample.log_probs is not None:
            log_probs = {"content": [{"token": text, "logprob": lp, "bytes": list(text.encode()), "top_logprobs": []}
                                     for text, lp in zip(self._token_texts(sample.tokens), sample.log_probs)]}
        message = {"role": "assistant", "content": sample.text}
        calls = parse_tool_calls(sample.text) if extras.tools else []
        finish = sample.finish
        if calls and all(call.error is None for call in calls):
            message["tool_calls"] = [{**({"index": k} if streamed else {}), "id": f"call_{uuid.uuid4().hex[:24]}",
                                      "type": "function", "function": {"name": call.name,
                                                                       "arguments": json.dumps(call.arguments)}}
                                     for k, call in enumerate(calls)]
            finish = "tool_calls" if finish == "stop" else finish
        return {"index": index, ("delta" if streamed else "message"): message, "logprobs": log_probs,
                "finish_reason": finish}


def _renamed(message: str) -> str:
    """A ``/generate`` error message with its field names as OpenAI's."""
    for old, new in RENAMED.items():
        message = message.replace(old, new)
    return message


def routes(server) -> list[web.RouteDef]:
    """``/v1/models``, ``/v1/completions`` and ``/v1/chat/completions`` over ``server`` (a
    :class:`~rlloom_server.app.RolloutServer`); the model is named by its path."""
    created = int(time.time())

    async def models(_request: web.Request) -> web.Response:
        card = {"id": server.model_path, "object": "model", "created": created, "owned_by": "rlloom",
                "root": server.model_path, "max_model_len": server.tokenizer.context_len}
        return web.json_response({"object": "list", "data": [card]})

    completions = CompletionsDialect(server.tokenizer, server.model_path)
    chat = ChatDialect(server.tokenizer, server.model_path)
    return [web.get("/v1/models", models),
            web.post("/v1/completions", lambda request: server.generate(request, completions)),
            web.post("/v1/chat/completions", lambda request: server.generate(request, chat))]
