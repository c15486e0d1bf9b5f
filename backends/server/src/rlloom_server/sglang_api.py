"""SGLang's native API beyond token ids: ``/generate`` with text, ``rid``, stop strings and ids, and
streaming; ``/tokenize``, ``/detokenize``, ``/get_server_info``, ``/health_generate``, ``/abort_request``.

``/generate`` (:class:`GenerateDialect`, on top of :func:`rlloom_serverkit.schema.parse_generate`):

- ``text`` (a string or a list): tokenised by the served tokenizer (special tokens added as its
  ``encode`` adds them), instead of ``input_ids``;
- ``rid`` (a string, or one per prompt): echoed as ``meta_info.id`` of the prompt's outputs;
- ``sampling_params.stop`` (strings, cut after decoding: :mod:`rlloom_server.text`),
  ``sampling_params.stop_token_ids`` (ids the engine stops on), ``skip_special_tokens`` (default true);
- every output carries ``text`` (its tokens decoded) and ``meta_info.weight_version`` (the version
  of the weights served: :mod:`rlloom_server.weights`); a stop string that ended it is
  ``finish_reason: {"type": "stop", "matched": "<string>"}``;
- ``stream: true``: server-sent events, one per output (SGLang's cumulative form: the whole text and
  ``output_ids`` so far, here the finished output, as the engines answer whole completions; an
  ``index`` when the request has several outputs), then ``data: [DONE]``;
- ``return_logprob`` and ``stream`` must be JSON booleans (``"false"`` is 400);
- refused with 400 naming the field unless "off": ``min_p`` (0), ``frequency_penalty`` and
  ``presence_penalty`` (0), ``repetition_penalty`` (1), ``min_new_tokens`` (0),
  ``logprob_start_len`` (-1: no prompt log-probs), ``top_logprobs_num`` (0),
  ``return_text_in_logprobs`` (false): the engines compute none of these.
"""

from __future__ import annotations

import asyncio
import dataclasses
from typing import Any

from aiohttp import web
from rlloom import Completion, SamplingParams
from rlloom.protocols import BatchesRequests
from rlloom_serverkit.schema import GenerateRequest, SchemaError, parse_generate, render_generate

from rlloom_server.sse import send_events
from rlloom_server.text import NEUTRAL_SAMPLING, ServedTokenizer, flag, refuse_unless_neutral, stop_strings
from rlloom_server.weights import WeightVersion

NEUTRAL_REQUEST = {"logprob_start_len": -1, "top_logprobs_num": 0, "return_text_in_logprobs": False}


@dataclasses.dataclass(frozen=True)
class Extras:
    """What a ``/generate`` answer needs beyond the parsed request."""

    rids: list[str] | None
    stream: bool
    stops: tuple[str, ...]
    skip_special_tokens: bool


class GenerateDialect:
    """SGLang's ``/generate`` (module doc) over the server's token-in, token-out core."""

    def __init__(self, tokenizer: ServedTokenizer, versions: WeightVersion) -> None:
        self.tokenizer = tokenizer
        self.versions = versions

    def parse(self, body: Any) -> tuple[GenerateRequest, Extras]:
        """The request for the engine and the answer's :class:`Extras`; SchemaError naming the field."""
        if not isinstance(body, dict):
            raise SchemaError("the body must be a JSON object")
        body = dict(body)
        stream = flag(body, "stream", "stream")
        refuse_unless_neutral(body, NEUTRAL_REQUEST, "")
        rid = body.pop("rid", None)
        for key in ("stream", *NEUTRAL_REQUEST):
            body.pop(key, None)
        if "text" in body:
            body["input_ids"] = self._encode(body.pop("text"), has_ids="input_ids" in body)
        stops, stop_ids, skip = (), (), True
        if isinstance(body.get("sampling_params"), dict):
            params = body["sampling_params"] = dict(body["sampling_params"])
            stops = stop_strings(params.pop("stop", None), "sampling_params.stop")
            raw_ids = params.pop("stop_token_ids", None)
            stop_ids = tuple(self.tokenizer.token_ids(raw_ids, "sampling_params.stop_token_ids")) if raw_ids else ()
            skip = flag(params, "skip_special_tokens", "sampling_params.skip_special_tokens", default=True)
            refuse_unless_neutral(params, NEUTRAL_SAMPLING, "sampling_params.")
            for key in ("skip_special_tokens", *NEUTRAL_SAMPLING):
                params.pop(key, None)
        parsed = parse_generate(body)
        parsed = dataclasses.replace(parsed, sampling=dataclasses.replace(parsed.sampling, stop_token_ids=stop_ids))
        return parsed, Extras(_rids(rid, len(parsed.prompts)), stream, stops, skip)

    def _encode(self, text: Any, has_ids: bool) -> list[int] | list[list[int]]:
        if has_ids:
            raise SchemaError("send text or input_ids, not both")
        texts = text if isinstance(text, list) else [text]
        if not texts or not all(isinstance(t, str) and t for t in texts):
            raise SchemaError("text must be a non-empty string or a non-empty list of them")
        ids = [self.tokenizer.encode(t) for t in texts]
        for i, prompt in enumerate(ids):
            if not prompt:
                raise SchemaError(f"text[{i}] encodes to no tokens")
        return ids if isinstance(text, list) else ids[0]

    async def answer(self, request: web.Request, parsed: GenerateRequest, answers: list[Completion],
                     extras: Extras) -> web.StreamResponse:
        """The outputs (JSON, or server-sent events with ``stream``) for the engine's ``answers``."""
        samples = [self.tokenizer.samples(a, extras.stops, extras.skip_special_tokens) for a in answers]
        cut = [Completion([s.tokens for s in group], None if any(s.log_probs is None for s in group)
                          else [s.log_probs for s in group], [s.finish for s in group]) for group in samples]
        rendered = render_generate(parsed, cut)
        outputs = rendered if isinstance(rendered, list) else [rendered]
        flat = [(i, s) for i, group in enumerate(samples) for s in group]
        version = self.versions.current
        for output, (prompt, sample) in zip(outputs, flat):
            output["text"] = sample.text
            output["meta_info"]["weight_version"] = version
            if isinstance(sample.matched, str):
                output["meta_info"]["finish_reason"] = {"type": "stop", "matched": sample.matched}
            if extras.rids is not None:
                output["meta_info"]["id"] = extras.rids[prompt]
        if not extras.stream:
            return web.json_response(rendered)
        if len(outputs) > 1:
            for k, output in enumerate(outputs):
                output["index"] = k
        return await send_events(request, outputs)


def aborted(parsed: GenerateRequest, extras: Extras) -> dict | list[dict]:
    """The answer to a request cancelled by ``/abort_request``: each output empty, finished by
    ``{"type": "abort"}`` (SGLang's form), shaped as a ``/generate`` answer (one object for one
    prompt with ``n`` 1, else a list, prompt-major)."""
    outputs = [{"text": "", "output_ids": [], "meta_info": {
        "id": extras.rids[prompt], "finish_reason": {"type": "abort", "message": "aborted by /abort_request"},
        "prompt_tokens": len(ids), "completion_tokens": 0}}
        for prompt, ids in enumerate(parsed.prompts) for _ in range(parsed.sampling.n)]
    return outputs[0] if len(outputs) == 1 and not parsed.batched else outputs


def _rids(rid: Any, prompts: int) -> list[str] | None:
    """``rid`` (absent, a string, or a list of one string per prompt) as one string per prompt."""
    if rid is None:
        return None
    rids = rid if isinstance(rid, list) else [rid] * prompts
    if len(rids) != prompts or not all(isinstance(r, str) for r in rids):
        raise SchemaError(f"rid must be a string or a list of {prompts} strings (one per prompt), got {rid!r}")
    return rids


def routes(server) -> list[web.RouteDef]:
    """The routes of the module doc but ``/generate`` (``server``: the :class:`~rlloom_server.app.RolloutServer`)."""
    api = NativeRoutes(server)
    return [web.post("/tokenize", api.tokenize), web.post("/v1/tokenize", api.tokenize),
            web.post("/detokenize", api.detokenize), web.post("/v1/detokenize", api.detokenize),
            web.get("/get_server_info", api.server_info), web.get("/health_generate", api.health_generate),
            web.post("/abort_request", api.abort_request)]


class NativeRoutes:
    """``/tokenize``, ``/detokenize`` (SGLang's shapes), ``/get_server_info``, ``/health_generate``."""

    def __init__(self, server) -> None:
        self.server = server
        self.tokenizer: ServedTokenizer = server.tokenizer

    async def tokenize(self, request: web.Request) -> web.Response:
        """``{"prompt": str | [str], "add_special_tokens": true}`` -> ``{"tokens", "count", "max_model_len"}``."""
        async def answer(body: dict) -> dict:
            prompt, special = body.get("prompt"), flag(body, "add_special_tokens", "add_special_tokens", True)
            prompts = prompt if isinstance(prompt, list) else [prompt]
            if not all(isinstance(p, str) for p in prompts):
                raise SchemaError("prompt must be a string or a list of strings")
            ids = [self.tokenizer.encode(p, special) for p in prompts]
            tokens, count = (ids, [len(i) for i in ids]) if isinstance(prompt, list) else (ids[0], len(ids[0]))
            return {"tokens": tokens, "count": count, "max_model_len": self.tokenizer.context_len}
        return await _json_route(request, answer)

    async def detokenize(self, request: web.Request) -> web.Response:
        """``{"tokens": [id] | [[id]], "skip_special_tokens": true}`` -> ``{"text": str | [str]}``."""
        async def answer(body: dict) -> dict:
            tokens, skip = body.get("tokens"), flag(body, "skip_special_tokens", "skip_special_tokens", True)
            batched = isinstance(tokens, list) and bool(tokens) and isinstance(tokens[0], list)
            lists = tokens if batched else [tokens]
            texts = [self.tokenizer.decode(self.tokenizer.token_ids(ids, "tokens"), skip) if ids else ""
                     for ids in lists]
            return {"text": texts if batched else texts[0]}
        return await _json_route(request, answer)

    async def server_info(self, _request: web.Request) -> web.Response:
        """The server's settings (the API key left out), its engine, model and tokenizer limits, and
        ``decode_steps``: the engine's decoding model calls so far (None where it does not count them)."""
        settings = {k: v for k, v in dataclasses.asdict(self.server.cfg).items() if k != "api_key"}
        engine = self.server.engine
        return web.json_response({**settings, "model_path": self.server.model_path, "engine": self.server.engine_name,
                                  "vocab_size": self.tokenizer.vocab_size, "context_len": self.tokenizer.context_len,
                                  "api_key_required": self.server.cfg.api_key is not None,
                                  "decode_steps": engine.decode_steps if isinstance(engine, BatchesRequests) else None})

    async def abort_request(self, request: web.Request) -> web.Response:
        """``{"rid": str}`` (or ``{"abort_all": true}``): cancel the generate requests sent with that
        ``rid``; each answers with an ``abort`` finish reason (:func:`aborted`). ``{"aborted": count}``."""
        async def answer(body: dict) -> dict:
            rid, abort_all = body.get("rid"), flag(body, "abort_all", "abort_all", False)
            if not abort_all and not isinstance(rid, str):
                raise SchemaError(f"rid must be a string (or abort_all true), got {rid!r}")
            return {"aborted": self.server.running.abort(rid, abort_all)}
        return await _json_route(request, answer)

    async def health_generate(self, _request: web.Request) -> web.Response:
        """200 once the engine has generated one greedy token (prompt: token 0); 503 with the reason
        when it fails or takes longer than ``request_timeout_s``."""
        try:
            await asyncio.wait_for(self.server.scheduler.generate_one(
                [0], SamplingParams(temperature=0.0, max_new_tokens=1)), self.server.cfg.request_timeout_s)
        except Exception as error:  # noqa: BLE001 - the health check reports any failure
            message = f"{type(error).__name__}: {error}"
            return web.json_response({"error": {"message": message, "code": 503}}, status=503)
        return web.Response(text="ok")


async def _json_route(request: web.Request, answer) -> web.Response:
    """``answer(body)`` for a JSON object body, as JSON; 400 naming the field on a SchemaError."""
    try:
        body = await request.json()
        if not isinstance(body, dict):
            raise SchemaError("the body must be a JSON object")
        return web.json_response(await answer(body))
    except ValueError as error:  # SchemaError, or a body that is not JSON
        return web.json_response({"error": {"message": str(error), "code": 400}}, status=400)
