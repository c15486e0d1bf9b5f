"""``rollout=server``: a rollout engine that sends every prompt to one of several HTTP servers
(``rlloom serve``, or SGLang itself through ``rollout=sglang``) and gathers the answers.

Load balancing: each prompt goes to the server with the fewest requests outstanding from this
client. A request that fails to connect, times out or gets a 5xx is retried on another server
(the least loaded one other than those that failed it) after ``backoff_s * 2**attempt`` seconds,
at most ``retries`` times; then the call raises naming each URL tried and what it answered. A
server that failed is skipped for ``down_s`` seconds while another is up, so a dead server costs
one failed request per ``down_s``, not one per prompt. A 4xx
or an answer that does not follow the schema raises at once, naming the URL: retrying elsewhere
would not help.

Weights go to every server: :meth:`update_weights` (``resharder=in_process``) posts the tensors as
safetensors buckets of ``weight_bucket_mb`` to ``/update_weights_from_tensor``;
:meth:`load_weights_from_dir` (``resharder=safetensors``, servers sharing the folder) names the
folder to ``/update_weights_from_disk``. Each push names its weights with SGLang's
``weight_version`` field, ``rlloom-<client id>-<push count>`` (every bucket of a push carries it; the
client id is random, one per engine), followed by ``-v<version>`` when the caller labels the weights with the
trainer's version (:class:`~rlloom_enginekit.resharder.LabelsWeights`: the async pipeline does), so the served
version names the step they are from; a batch generated under labelled weights carries the label as each row's
``weight_version`` (docs/async.md). From the first push on, every answer's
``meta_info.weight_version`` must be the last pushed one, else the call raises: another client has
loaded other weights into that server since (two runs sharing one), and this run would train on
samples of weights that are not its own. A run pushes its starting weights before step 0
(:class:`~rlloom.protocols.StartsWithOtherWeights`, ``docs/server.md``).

Asynchronous training (docs/async.md, docs/server.md): :meth:`ServerRolloutEngine.generate_requests` takes per-row
seeds, prompt and response indices and budgets, hands each prompt's responses on as its answer arrives
(``trainer.stream_groups``) and, once its ``cancelled`` flags are set, withdraws the servers' requests in flight
(``/pause_generation`` in mode ``abort``, then ``/continue_generation``), which come back with their tokens so far
(``trainer.partial_rollout``).

LoRA adapters (``resharder.lora_sync=adapter``): :meth:`load_adapter` posts SGLang's
``/load_lora_adapter`` ``{"lora_name", "lora_path"}`` (a folder the servers read) to every server, then
``/unload_lora_adapter`` ``{"lora_name"}`` of the previous one; every ``/generate`` body names the
loaded adapter in ``lora_path``.
"""

from __future__ import annotations

import asyncio
import base64
import dataclasses
import time
import uuid
from collections.abc import Callable, Iterable

import torch
from rlloom import Batch, Completion, EngineSpec, SamplingParams
from rlloom_enginekit.batching import completions_batch
from rlloom_enginekit.partial import INTERRUPTED_FIELD, VERSION_FIELD
from rlloom_enginekit.prompts import (MAX_TOKENS_FIELD, RESPONSE_INDEX_FIELD, check_left_padded, model_token_ids,
                                      prompt_indices, prompt_token_lists, row_seeds)
from rlloom_enginekit.safetensors_dir import tensor_buckets

from rlloom_serverkit.config import ServerRolloutConfig
from rlloom_serverkit.schema import SchemaError, generate_bodies, merge_completions, parse_generate_answer

RETRYABLE_STATUS = (500, 502, 503, 504)


WATCH_S = 0.005  # how often a call watches its cancelled flags (partial rollouts)


@dataclasses.dataclass
class _Rows:
    """The prompt rows of one :meth:`ServerRolloutEngine.generate_requests` call: each row's token ids, prompt index,
    seed, first response index and budget."""

    tokens: list[list[int]]
    indices: list[int]
    seeds: list[int]
    firsts: list[int]
    budgets: list[int]


def _report(finished: Callable, row: int, completion: Completion) -> None:
    """Hand prompt ``row``'s responses that were not withdrawn (finish reason ``abort``) to ``finished`` as output
    rows ``row * n + j``."""
    n = len(completion.token_ids)
    kept = [j for j in range(n) if completion.finish_reasons[j] != "abort"]
    if kept and completion.log_probs is None:
        raise ServerError("rollout=server: streamed groups need the sampled tokens' log-probs, and the server gave "
                          "none (vLLM under top-k / top-p filtering)")
    if kept:
        finished([row * n + j for j in kept], [completion.token_ids[j] for j in kept],
                 [completion.log_probs[j] for j in kept])


class ServerError(RuntimeError):
    """A server could not be used; the message names its URL. ``retryable``: another server (or a
    later try) may succeed (transport errors, timeouts, 5xx)."""

    def __init__(self, message: str, retryable: bool = False) -> None:
        super().__init__(message)
        self.retryable = retryable


class ServerRolloutEngine:
    """Implements :class:`~rlloom.protocols.RolloutEngine` and ``AsyncRolloutEngine`` over HTTP
    servers (see the module doc), :class:`~rlloom_enginekit.resharder.LabelsWeights`,
    :class:`~rlloom_enginekit.stream.StreamsRows` and :class:`~rlloom_enginekit.partial.Interruptible`.
    ``send_prompt_index``: the servers understand rlloom's ``prompt_index`` (False for SGLang, which gets one
    request per sample, each with its own seed)."""

    labels_weights = True
    reports_finished_rows = True  # rlloom_enginekit.stream.StreamsRows: each prompt's rows as its answer arrives
    flags_interrupted_rows = True  # rlloom_enginekit.partial.Interruptible: a call withdrawn through cancelled

    def __init__(self, cfg: ServerRolloutConfig, spec: EngineSpec, send_prompt_index: bool = True) -> None:
        self.config = cfg
        self.urls = [str(url).rstrip("/") for url in cfg.urls]
        self.send_prompt_index = send_prompt_index
        _, self.pad_id = model_token_ids(spec.model_path)
        self._generator = torch.Generator().manual_seed(spec.seed)
        self.outstanding = [0] * len(self.urls)
        self.down_until = [0.0] * len(self.urls)  # time.monotonic() before which a failed server is passed over
        self.requests_served = [0] * len(self.urls)
        self.retried = 0
        self.client_id = uuid.uuid4().hex[:12]
        self.pushes = 0
        self.weight_version: str | None = None  # the last version pushed; answers must carry it
        self.label: int | None = None  # the trainer's version of the weights last pushed, when it gave one
        self.adapter: str | None = None  # the LoRA adapter every request names (load_adapter)
        asyncio.run(self._check_servers())

    # ------------------------------------------------------------------------------ HTTP
    def _session(self):
        import aiohttp

        timeout = aiohttp.ClientTimeout(total=self.config.timeout_s, sock_connect=self.config.connect_timeout_s)
        headers = {} if self.config.api_key is None else {"Authorization": f"Bearer {self.config.api_key}"}
        return aiohttp.ClientSession(timeout=timeout, headers=headers)

    async def _check_servers(self) -> None:
        async with self._session() as session:
            await asyncio.gather(*(self._post(session, i, "/health", None, method="GET") for i in range(len(self.urls))))

    async def _post(self, session, server: int, path: str, body: dict | None, method: str = "POST"):
        """The JSON (or text) answer of ``server`` to ``path``; ServerError naming the URL when the
        server cannot be reached or answers an error status (``retryable`` set for 5xx and transport errors)."""
        import aiohttp

        url = self.urls[server] + path
        try:
            async with session.request(method, url, json=body) as response:
                text = await response.text()
                if response.status >= 400:
                    raise ServerError(f"rollout=server: {url} answered {response.status}: {text[:500]}",
                                      retryable=response.status in RETRYABLE_STATUS)
                if response.content_type == "application/json":
                    return await response.json()
                return text
        except (aiohttp.ClientError, asyncio.TimeoutError, OSError) as error:
            raise ServerError(f"rollout=server: cannot reach {url}: {type(error).__name__}: {error or 'timed out'}",
                              retryable=True) from error

    async def _to_all(self, path: str, body: dict | None = None) -> None:
        async with self._session() as session:
            answers = await asyncio.gather(*(self._post(session, i, path, body) for i in range(len(self.urls))))
        for url, answer in zip(self.urls, answers):
            if isinstance(answer, dict) and answer.get("success") is False:
                raise ServerError(f"rollout=server: {url}{path} failed: {answer.get('message')}")

    # ------------------------------------------------------------------------------ generation
    def _pick(self, excluded: set[int]) -> int:
        """The least loaded server not in ``excluded`` and not marked down; relaxing those in turn
        when none is left."""
        now = time.monotonic()
        servers = range(len(self.urls))
        candidates = ([i for i in servers if i not in excluded and self.down_until[i] <= now]
                      or [i for i in servers if i not in excluded] or list(servers))
        return min(candidates, key=lambda i: self.outstanding[i])

    async def _request(self, session, limit: asyncio.Semaphore, prompt_ids: list[int], sampling: SamplingParams,
                       seed: int, first: int = 0) -> Completion:
        """One prompt's ``sampling.n`` samples, the first of them sample ``first`` (one request, or one per sample
        for SGLang)."""
        bodies = generate_bodies(prompt_ids, sampling, seed, self.send_prompt_index, self.adapter, first)
        parts = await asyncio.gather(*(self._send(session, limit, body) for body in bodies))
        return parts[0] if len(parts) == 1 else merge_completions(list(parts))

    async def _send(self, session, limit: asyncio.Semaphore, body: dict) -> Completion:
        """``body`` to the least loaded server, retried elsewhere as the module doc says."""
        n = body["sampling_params"]["n"]
        failed: dict[int, str] = {}
        async with limit:
            for attempt in range(self.config.retries + 1):
                server = self._pick(set(failed))
                self.outstanding[server] += 1
                try:
                    answer = await self._post(session, server, "/generate", body)
                except ServerError as error:
                    if not error.retryable:
                        raise
                    failed[server] = str(error)
                    self.down_until[server] = time.monotonic() + self.config.down_s
                    if attempt < self.config.retries:
                        self.retried += 1
                        await asyncio.sleep(self.config.backoff_s * 2**attempt)
                    continue
                finally:
                    self.outstanding[server] -= 1
                try:
                    completion = parse_generate_answer(answer, n)
                except SchemaError as error:
                    raise ServerError(f"rollout=server: {self.urls[server]}/generate answered malformed data: "
                                      f"{error}") from None
                self._check_version(server, answer)
                self.requests_served[server] += 1
                return completion
        raise ServerError("rollout=server: the request failed on every try: " + "; ".join(failed.values()))

    async def _generate_all(self, rows: _Rows, sampling: SamplingParams, cancelled: torch.Tensor | None,
                            finished: Callable | None) -> list[Completion]:
        """Each row's completion, every request in flight at once (up to ``max_in_flight``), each handed to
        ``finished`` as it arrives; once ``cancelled`` has a flag set, the call is withdrawn
        (:meth:`generate_requests`)."""
        limit, withdrawn = asyncio.Semaphore(self.config.max_in_flight), asyncio.Event()

        async def one(row: int, session) -> Completion:
            if withdrawn.is_set():  # not sent: withdrawn with no token
                return Completion([[]] * sampling.n, [[]] * sampling.n, ["abort"] * sampling.n)
            params = dataclasses.replace(sampling, first_prompt=rows.indices[row], max_new_tokens=rows.budgets[row])
            completion = await self._request(session, limit, rows.tokens[row], params, rows.seeds[row],
                                             rows.firsts[row])
            if finished is not None:
                _report(finished, row, completion)
            return completion

        async with self._session() as session:
            watcher = None if cancelled is None else asyncio.ensure_future(self._watch(session, cancelled, withdrawn))
            try:
                return await asyncio.gather(*(one(row, session) for row in range(len(rows.tokens))))
            finally:
                if watcher is not None and withdrawn.is_set():
                    await watcher  # the servers paused: continued before returning
                elif watcher is not None:
                    watcher.cancel()

    async def _watch(self, session, cancelled: torch.Tensor, withdrawn: asyncio.Event) -> None:
        """Once a flag of ``cancelled`` is set: ``/pause_generation`` in mode ``abort`` on every server (each
        request in flight answered with its tokens so far, finished by ``abort``), then ``/continue_generation``."""
        while not bool(cancelled.any()):
            await asyncio.sleep(WATCH_S)
        withdrawn.set()
        for path, body in (("/pause_generation", {"mode": "abort"}), ("/continue_generation", {})):
            await asyncio.gather(*(self._post(session, i, path, body) for i in range(len(self.urls))))

    def _seed(self, sampling: SamplingParams) -> int:
        if sampling.seed is not None:
            return sampling.seed
        return int(torch.randint(2**62, (), generator=self._generator))

    def generate(self, prompts: Batch, sampling: SamplingParams) -> Batch:
        """Contract: ``RolloutEngine.generate``; one request per prompt (with ``n`` samples), all in
        flight at once up to ``max_in_flight``. Randomness is keyed by (seed, prompt index,
        response) on an rlloom server, so the output does not depend on which server answered."""
        return self.generate_requests(prompts, sampling)

    def generate_requests(self, prompts: Batch, sampling: SamplingParams, cancelled: torch.Tensor | None = None,
                          finished: Callable | None = None) -> Batch:
        """:meth:`generate` where each prompt row may carry its own seed (:data:`~rlloom.batch.SEED_FIELD`), prompt
        index (:data:`~rlloom.batch.PROMPT_INDEX_FIELD`), first response index
        (:data:`~rlloom_enginekit.prompts.RESPONSE_INDEX_FIELD`) and budget
        (:data:`~rlloom_enginekit.prompts.MAX_TOKENS_FIELD`), and ``finished(rows, tokens, log_probs)`` gets each
        prompt's output rows (``i * n`` to ``i * n + n - 1``) the moment its answer arrives
        (:class:`rlloom_enginekit.stream.StreamsRows`: ``trainer.stream_groups``); an ``rlloom serve`` over the hf
        engine answers each as soon as its rows are done. ``cancelled`` [B] (another thread sets it;
        :class:`rlloom_enginekit.partial.Interruptible`: ``trainer.partial_rollout``): once any flag is set, every
        server withdraws its requests in flight (``/pause_generation`` in mode ``abort``, then
        ``/continue_generation``), which come back with their tokens so far; those rows, and the rows not yet
        sent, are flagged in :data:`~rlloom_enginekit.partial.INTERRUPTED_FIELD` and never reported to ``finished``.
        """
        prompts.require("prompts", "prompt_mask")
        check_left_padded(prompts["prompts"], prompts["prompt_mask"])
        rows = _Rows(prompt_token_lists(prompts["prompts"], prompts["prompt_mask"]),
                     prompt_indices(prompts, sampling.first_prompt).tolist(),
                     row_seeds(prompts, self._seed(sampling)).tolist(),
                     prompts.get(RESPONSE_INDEX_FIELD, torch.zeros(len(prompts), dtype=torch.long)).tolist(),
                     prompts.get(MAX_TOKENS_FIELD, torch.full((len(prompts),), sampling.max_new_tokens)).tolist())
        answers = asyncio.run(self._generate_all(rows, sampling, cancelled, finished))
        out = completions_batch(prompts, answers, sampling, self.pad_id)
        out[INTERRUPTED_FIELD] = torch.tensor([reason == "abort" for answer in answers
                                               for reason in answer.finish_reasons], dtype=torch.bool)
        return self._stamped(out)

    def _stamped(self, out: Batch) -> Batch:
        """``out`` with the label of the weights every answer carried (:meth:`_check_version`) as each row's
        ``weight_version`` when they have one, and this client's counters (:meth:`metrics`) in ``meta["metrics"]``,
        which reach the step's metrics wherever the engine lives (the rollout process of an async mode too)."""
        if self.label is not None:
            out[VERSION_FIELD] = torch.full((len(out),), self.label, dtype=torch.long)
        out.meta["metrics"] = {**out.meta.get("metrics", {}), **self.metrics()}
        return out

    async def generate_one(self, prompt_ids: list[int], sampling: SamplingParams) -> Completion:
        """Contract: ``AsyncRolloutEngine.generate_one``; ``sampling.seed`` None draws one."""
        limit = asyncio.Semaphore(self.config.max_in_flight)
        async with self._session() as session:
            return await self._request(session, limit, list(prompt_ids), sampling, self._seed(sampling))

    def _check_version(self, server: int, answer) -> None:
        """ServerError unless every output of ``answer`` carries the last pushed weight version
        (nothing to check before the first push)."""
        if self.weight_version is None:
            return
        outputs = answer if isinstance(answer, list) else [answer]
        versions = {output.get("meta_info", {}).get("weight_version") for output in outputs}
        if versions != {self.weight_version}:
            raise ServerError(
                f"rollout=server: {self.urls[server]} answered with weight version {sorted(map(str, versions))}, "
                f"not {self.weight_version!r}, the weights this run pushed: another client has loaded other weights "
                f"into it since (two runs sharing one server?). Give each run servers of its own (rollout.urls) "
                f"and start it again (a resumed run pushes its weights first).")

    # ------------------------------------------------------------------------------ weights and memory
    def _next_version(self, label: int | None = None) -> str:
        """The name of the next push: ``rlloom-<client id>-<push count>``, ``-v<label>`` appended when labelled."""
        self.pushes += 1
        return f"rlloom-{self.client_id}-{self.pushes}" + ("" if label is None else f"-v{label}")

    def update_weights(self, named_tensors: Iterable[tuple[str, torch.Tensor]], version: int | None = None) -> None:
        """Send full tensors (Hugging Face names) to every server, ``weight_bucket_mb`` per request,
        each bucket with the push's ``weight_version``, named with ``version`` when given (module doc)."""
        from safetensors.torch import save

        label, version = version, self._next_version(version)
        on_host = ((name, tensor.detach().to("cpu").contiguous()) for name, tensor in named_tensors)
        for bucket in tensor_buckets(on_host, self.config.weight_bucket_mb * 10**6):
            blob = base64.b64encode(save(dict(bucket))).decode("ascii")
            asyncio.run(self._to_all("/update_weights_from_tensor",
                                     {"serialized_named_tensors": [blob], "weight_version": version}))
            self.weight_version, self.label = version, label

    def load_weights_from_dir(self, path: str) -> None:
        """Every server loads the ``*.safetensors`` files of ``path`` (a folder they can read), as
        weight version :meth:`_next_version` (module doc)."""
        version = self._next_version()
        asyncio.run(self._to_all("/update_weights_from_disk", {"model_path": path, "weight_version": version}))
        self.weight_version, self.label = version, None

    def load_adapter(self, path: str, name: str) -> None:
        """Every server loads the PEFT adapter folder ``path`` (which it must be able to read) as ``name``
        and drops the previous adapter; requests name ``name`` from now on
        (:class:`rlloom_enginekit.lora.LoadsAdapters`)."""
        asyncio.run(self._to_all("/load_lora_adapter", {"lora_name": name, "lora_path": path}))
        previous, self.adapter = self.adapter, name
        if previous is not None:
            asyncio.run(self._to_all("/unload_lora_adapter", {"lora_name": previous}))

    def sleep(self) -> None:
        if self.config.sleep_servers:
            asyncio.run(self._to_all("/release_memory_occupation", {}))

    def wake_up(self) -> None:
        if self.config.sleep_servers:
            asyncio.run(self._to_all("/resume_memory_occupation", {}))

    def metrics(self) -> dict[str, float]:
        """Requests each server answered and requests retried, since the engine started."""
        result = {f"rollout/server{i}/requests": float(n) for i, n in enumerate(self.requests_served)}
        result["rollout/retried_requests"] = float(self.retried)
        return result

    def close(self) -> None:
        """Nothing to release: the servers belong to whoever started them."""
