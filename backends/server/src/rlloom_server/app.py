"""The HTTP server of ``rlloom serve``: one rollout engine behind SGLang's native endpoints and OpenAI's.

=================================  ==========================================================
endpoint                           what it does
=================================  ==========================================================
``GET /health``                    200 when the server answers
``GET /get_model_info``            ``{"model_path", "engine", "is_generation": true, "weight_version"}``
``POST /generate``                 token ids or text in, both out (:mod:`rlloom_serverkit.schema`, ``sglang_api``)
``POST /update_weights_from_disk`` ``{"model_path": dir}``: the ``*.safetensors`` files of ``dir``
``POST /update_weights_from_tensor`` ``{"serialized_named_tensors": [base64 safetensors bytes, ...]}``
                                   (both with an optional ``weight_version``)
``GET /get_weight_version``        ``{"weight_version"}``; ``/pause_generation``, ``/continue_generation``
                                   (:mod:`rlloom_server.weights`)
``POST /load_lora_adapter``       ``{"lora_name", "lora_path": dir}``: the PEFT adapter folder ``dir``, applied to
                                   every request from then on (engines with ``load_adapter``: vllm)
``POST /unload_lora_adapter``     ``{"lora_name"}``: forgets an adapter already replaced
``POST /release_memory_occupation`` the engine's ``sleep()``
``POST /resume_memory_occupation`` the engine's ``wake_up()``
``POST /flush_cache``              nothing to flush (the engines keep no cache between calls)
``/tokenize``, ``/detokenize``     SGLang's text routes, ``/get_server_info``, ``/health_generate``
                                   (:mod:`rlloom_server.sglang_api`)
``/v1/...``                        OpenAI's models, completions and chat completions
                                   (:mod:`rlloom_server.openai_api`)
=================================  ==========================================================

``/generate`` and the OpenAI routes share one path (:meth:`RolloutServer.generate`): a *dialect*
turns the body into a ``/generate`` request and writes the answer (SGLang's by default, with text,
``rid``, stop strings and streaming: :class:`rlloom_server.sglang_api.GenerateDialect`). With
``api_key`` set, every route but ``/health`` needs it (:mod:`rlloom_server.auth`).

Generation goes through a :class:`~rlloom_enginekit.batching.BatchingScheduler`, so concurrent requests are
batched; weight updates and sleep run on the engine's thread between batches. At most
``max_concurrency`` generate requests are served at once (more get 503 at once, so a client can
go elsewhere); one running past ``request_timeout_s`` is cancelled and answered 504, one whose
client disconnects is cancelled, and ``/abort_request`` cancels the requests of a ``rid``
(:mod:`rlloom_server.aborts`): the engine stops their rows within a decode step where it can
(:class:`rlloom.protocols.BatchesRequests`). A request is
checked whole before it reaches a batch (:mod:`rlloom_server.door`): a malformed one, or one outside
the model's vocabulary or context or the server's ``n`` / ``max_new_tokens`` limits, gets 400 with
the field named; one larger than the token budget 413. An admitted request waits for its tokens
in the budget of tokens in flight (:class:`~rlloom_server.budget.TokenBudget`). An engine that
fails gets 500 with its message.
Weight answers follow SGLang: ``{"success": bool, "message": str}``. The server serves one policy: a
loaded LoRA adapter applies to every request (SGLang applies one only to requests naming it); a request's
``lora_path``, when given, must name the loaded adapter (else 400).
"""

from __future__ import annotations

import asyncio
import base64
import binascii
import dataclasses
import json
import os
from typing import Any, Protocol

from aiohttp import web
from rlloom_enginekit.batching import BatchingScheduler
from rlloom_enginekit.lora import LoadsAdapters
from rlloom_enginekit.safetensors_dir import read_safetensors_dir
from rlloom import Completion
from rlloom.protocols import LoadsWeightsFromDir, RolloutEngine

from rlloom_server import openai_api, sglang_api, weights
from rlloom_server.aborts import RunningRequests
from rlloom_server.auth import api_key_middleware
from rlloom_server.budget import TokenBudget
from rlloom_server.config import ServeConfig
from rlloom_server.door import Limits, RequestTooLarge, admit
from rlloom_server.text import ServedTokenizer
from rlloom_serverkit.schema import GenerateRequest, SchemaError


def error_response(status: int, message: str) -> web.Response:
    return web.json_response({"error": {"message": message, "code": status}}, status=status)


def _weights_answer(success: bool, message: str) -> web.Response:
    return web.json_response({"success": success, "message": message}, status=200 if success else 400)


async def read_json(request: web.Request) -> Any:
    try:
        return await request.json()
    except (json.JSONDecodeError, UnicodeDecodeError) as error:
        raise SchemaError(f"the body is not JSON: {error}") from None


def read_safetensors_bytes(blobs: Any) -> list[tuple[str, Any]]:
    """The named tensors of a list of base64-encoded safetensors files; SchemaError if malformed."""
    from safetensors.torch import load

    if not isinstance(blobs, list) or not all(isinstance(blob, str) for blob in blobs):
        raise SchemaError("serialized_named_tensors must be a list of base64 strings")
    tensors = []
    for k, blob in enumerate(blobs):
        try:
            tensors.extend(load(base64.b64decode(blob, validate=True)).items())
        except (binascii.Error, ValueError, RuntimeError) as error:
            raise SchemaError(f"serialized_named_tensors[{k}] is not base64 safetensors: {error}") from None
    return tensors


class Dialect(Protocol):
    """One API's generate requests over the server's core: ``parse(body) -> (GenerateRequest,
    extras)`` (SchemaError naming the field), ``answer(request, parsed, completions, extras)``
    writes the answer (JSON, or server-sent events)."""

    def parse(self, body: Any) -> tuple[GenerateRequest, Any]: ...

    async def answer(self, request: web.Request, parsed: GenerateRequest, answers: list[Completion],
                     extras: Any) -> web.StreamResponse: ...


class RolloutServer:
    """The routes over ``engine`` (a :class:`~rlloom.protocols.RolloutEngine`) within ``limits``
    (:func:`rlloom_server.door.server_limits`); see the module doc."""

    def __init__(self, engine: RolloutEngine, cfg: ServeConfig, model_path: str, engine_name: str,
                 limits: Limits) -> None:
        self.engine = engine
        self.cfg = cfg
        self.limits = limits
        self.budget = TokenBudget(limits.max_total_tokens)
        self.model_path = model_path
        self.engine_name = engine_name
        self.scheduler = BatchingScheduler(engine, max_batch_prompts=cfg.max_batch_prompts)
        self.in_flight = 0
        self.running = RunningRequests()
        self.tokenizer = ServedTokenizer.load(model_path)
        self.versions = weights.WeightVersion(cfg.weight_version)
        self.sglang = sglang_api.GenerateDialect(self.tokenizer, self.versions)
        self.adapter: str | None = None  # the LoRA adapter loaded (/load_lora_adapter)

    def app(self) -> web.Application:
        middlewares = [] if self.cfg.api_key is None else [api_key_middleware(self.cfg.api_key)]
        app = web.Application(client_max_size=self.cfg.max_body_mb * 2**20, middlewares=middlewares)
        app.add_routes([
            web.get("/health", self.health),
            web.get("/get_model_info", self.model_info),
            web.post("/generate", self.generate),
            web.post("/update_weights_from_disk", self.update_from_disk),
            web.post("/update_weights_from_tensor", self.update_from_tensor),
            web.post("/load_lora_adapter", self.load_adapter),
            web.post("/unload_lora_adapter", self.unload_adapter),
            web.post("/release_memory_occupation", self.release_memory),
            web.post("/resume_memory_occupation", self.resume_memory),
            web.post("/flush_cache", self.flush_cache),
            *sglang_api.routes(self),
            *weights.routes(self),
            *openai_api.routes(self),
        ])
        app.on_cleanup.append(self._close)
        return app

    async def _close(self, _app: web.Application) -> None:
        self.scheduler.close()
        self.engine.close()

    async def health(self, _request: web.Request) -> web.Response:
        return web.Response(text="ok")

    async def model_info(self, _request: web.Request) -> web.Response:
        return web.json_response({"model_path": self.model_path, "engine": self.engine_name, "is_generation": True,
                                  "weight_version": self.versions.current})

    async def generate(self, request: web.Request, dialect: Dialect | None = None) -> web.StreamResponse:
        """A generate request in ``dialect`` (SGLang's ``/generate`` when None)."""
        dialect = dialect or self.sglang
        if self.in_flight >= self.cfg.max_concurrency:
            return error_response(503, f"the server is at its limit of {self.cfg.max_concurrency} concurrent requests")
        self.in_flight += 1
        try:
            parsed, extras = dialect.parse(await read_json(request))
            if parsed.adapter is not None and parsed.adapter != self.adapter:
                raise SchemaError(f"lora_path={parsed.adapter!r} is not loaded (the loaded adapter: {self.adapter!r})")
            parsed, cost = admit(parsed, self.limits)
            work = asyncio.ensure_future(self._generate(parsed, cost))
            with self.running.track(getattr(extras, "rids", None), work):
                try:
                    answers = await asyncio.wait_for(work, self.cfg.request_timeout_s)
                except asyncio.CancelledError:
                    if not self.running.was_aborted(work):
                        raise  # the client went away: the work is cancelled with the handler
                    return web.json_response(sglang_api.aborted(parsed, extras))
            return await dialect.answer(request, parsed, answers, extras)
        except SchemaError as error:
            return error_response(400, str(error))
        except RequestTooLarge as error:
            return error_response(413, str(error))
        except asyncio.TimeoutError:
            return error_response(504, f"the request took longer than request_timeout_s={self.cfg.request_timeout_s}")
        except Exception as error:  # noqa: BLE001 - the engine's failure goes back to the caller
            return error_response(500, f"{type(error).__name__}: {error}")
        finally:
            self.in_flight -= 1

    async def _generate(self, parsed: GenerateRequest, cost: int) -> list:
        """The request's completions, one per prompt, once ``cost`` tokens of the budget are free."""
        async with self.budget.reserve(cost):
            return await asyncio.gather(*(self.scheduler.generate_one(ids, dataclasses.replace(
                parsed.sampling, first_prompt=parsed.sampling.first_prompt + i), parsed.response_index)
                for i, ids in enumerate(parsed.prompts)))

    async def _weights(self, load) -> web.Response:
        try:
            message = await load()
        except SchemaError as error:
            return _weights_answer(False, str(error))
        except Exception as error:  # noqa: BLE001 - reported, the server keeps serving
            return _weights_answer(False, f"{type(error).__name__}: {error}")
        return _weights_answer(True, message)

    async def _load_versioned(self, requested: str | None, load, *args: Any) -> str:
        """``load(*args)`` on the engine's thread, then the weight version (:mod:`rlloom_server.weights`)
        set there too, before the next engine call; returns the new version."""
        def load_then_version() -> str:
            load(*args)
            return self.versions.after_update(requested)
        return await self.scheduler.run_exclusive(load_then_version)

    async def update_from_disk(self, request: web.Request) -> web.Response:
        async def load() -> str:
            body = await read_json(request)
            path = body.get("model_path") if isinstance(body, dict) else None
            if not isinstance(path, str) or not os.path.isdir(path):
                raise SchemaError(f"model_path must name a folder on the server's machine, got {path!r}")
            requested = weights.requested_version(body)
            if isinstance(self.engine, LoadsWeightsFromDir):
                version = await self._load_versioned(requested, self.engine.load_weights_from_dir, path)
            else:
                version = await self._load_versioned(requested, self.engine.update_weights, read_safetensors_dir(path))
            return f"loaded the weights of {path}; weight version {version}"
        return await self._weights(load)

    async def update_from_tensor(self, request: web.Request) -> web.Response:
        async def load() -> str:
            body = await read_json(request)
            if not isinstance(body, dict):
                raise SchemaError("the body must be a JSON object")
            requested = weights.requested_version(body)
            tensors = read_safetensors_bytes(body.get("serialized_named_tensors"))
            version = await self._load_versioned(requested, self.engine.update_weights, tensors)
            return f"loaded {len(tensors)} tensors; weight version {version}"
        return await self._weights(load)

    async def load_adapter(self, request: web.Request) -> web.Response:
        async def load() -> str:
            body = await read_json(request)
            name, path = (body.get("lora_name"), body.get("lora_path")) if isinstance(body, dict) else (None, None)
            if not isinstance(name, str) or not name:
                raise SchemaError(f"lora_name must be a non-empty string, got {name!r}")
            if not isinstance(path, str) or not os.path.isdir(path):
                raise SchemaError(f"lora_path must name a PEFT adapter folder on the server's machine, got {path!r}")
            if not isinstance(self.engine, LoadsAdapters):
                raise SchemaError(f"rollout={self.engine_name} cannot load LoRA adapters (rollout=vllm with "
                                  "rollout.max_lora_rank can)")
            await self.scheduler.run_exclusive(self.engine.load_adapter, path, name)
            self.adapter = name
            return f"loaded the LoRA adapter {name} from {path}"
        return await self._weights(load)

    async def unload_adapter(self, request: web.Request) -> web.Response:
        async def unload() -> str:
            body = await read_json(request)
            name = body.get("lora_name") if isinstance(body, dict) else None
            if name is not None and name == self.adapter:
                raise SchemaError(f"{name} is the adapter served; load another to replace it")
            return f"{name!r} is not loaded (replaced by {self.adapter!r})"
        return await self._weights(unload)

    async def release_memory(self, _request: web.Request) -> web.Response:
        async def release() -> str:
            await self.scheduler.run_exclusive(self.engine.sleep)
            return "asleep"
        return await self._weights(release)

    async def resume_memory(self, _request: web.Request) -> web.Response:
        async def resume() -> str:
            await self.scheduler.run_exclusive(self.engine.wake_up)
            return "awake"
        return await self._weights(resume)

    async def flush_cache(self, _request: web.Request) -> web.Response:
        return web.Response(text="the engine keeps no cache between calls; nothing to flush")
