"""Per-request generation over an engine that only has the batch call.

:class:`BatchingScheduler` implements :class:`rlloom.protocols.AsyncRolloutEngine` for any
:class:`rlloom.protocols.RolloutEngine`: requests wait in a queue; a worker task takes what has
arrived (after waiting ``max_wait_s`` for more), groups requests whose sampling settings are equal
apart from ``first_prompt``, and runs each group as one ``engine.generate`` call of at most
``max_batch_prompts`` prompts, every row carrying its request's prompt index
(:data:`rlloom.batch.PROMPT_INDEX_FIELD`). So a request returns what the batch call would give its
prompt, whatever it was batched with.

An engine with the :class:`rlloom.protocols.BatchesRequests` ability (the hf engine) gets more:
seeded requests that differ only in their seed share a call (each row carries its seed,
:data:`rlloom.batch.SEED_FIELD`; unseeded requests group apart, the engine drawing one seed for
their call), and a request whose future is cancelled (its caller timed out or went away) is
flagged in the call's ``cancelled`` tensor, which the engine reads before every decode step; an engine that
also reports rows as they finish (:class:`~rlloom_enginekit.stream.StreamsRows`) answers each request as soon as
its rows are done, not when the call's longest row ends. Other
engines (vLLM, SGLang) get one call per distinct seed, and a cancelled request's rows run to the
end of their call (its result dropped). A call that fails is run again one request at a time, so
only the requests that fail alone get the error (an input the engine cannot take never fails or
stops the others; the worker itself never dies of one).

The engine runs on one thread of its own, never two calls at once: :meth:`run_exclusive` puts other
engine work (weight updates, sleep) in the same line, between generate calls. :meth:`pause` stops
generate calls from starting (requests wait in the queue) until :meth:`resume`; other engine work
still runs.
"""

from __future__ import annotations

import asyncio
import dataclasses
import functools
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any, TypeVar

import torch

from rlloom.batch import PROMPT_INDEX_FIELD, SEED_FIELD, Batch
from rlloom.protocols import BatchesRequests, RolloutEngine
from rlloom.types import Completion, SamplingParams
from rlloom_enginekit.partial import INTERRUPTED_FIELD
from rlloom_enginekit.prompts import RESPONSE_INDEX_FIELD, left_pad
from rlloom_enginekit.stream import PromptRows, StreamsRows

T = TypeVar("T")


@dataclasses.dataclass
class _Request:
    prompt_ids: list[int]
    sampling: SamplingParams
    future: asyncio.Future
    response_index: int = 0


def finish_reason(length: int, max_new_tokens: int, cut: bool = False) -> str:
    """A response's finish reason: ``"abort"`` when the engine withdrew it, ``"length"`` when it holds
    ``max_new_tokens`` tokens, else ``"stop"``."""
    return "abort" if cut else "length" if length >= max_new_tokens else "stop"


def completions(out: Batch, n: int, max_new_tokens: int) -> list[Completion]:
    """The batch call's output (``len(out) = B * n`` interleaved rows) as B completions; a row the engine withdrew
    (:data:`~rlloom_enginekit.partial.INTERRUPTED_FIELD`) finishes by ``"abort"`` with its tokens so far."""
    lengths = out["response_mask"].sum(dim=1).tolist()
    cut = out[INTERRUPTED_FIELD].tolist() if INTERRUPTED_FIELD in out else [False] * len(out)
    tokens = out["responses"].tolist()
    log_probs = out["rollout_log_probs"].tolist() if "rollout_log_probs" in out else None
    result = []
    for prompt in range(len(out) // n):
        rows = range(prompt * n, prompt * n + n)
        result.append(Completion(
            token_ids=[tokens[r][: lengths[r]] for r in rows],
            log_probs=None if log_probs is None else [log_probs[r][: lengths[r]] for r in rows],
            finish_reasons=[finish_reason(lengths[r], max_new_tokens, cut[r]) for r in rows],
        ))
    return result


def completions_batch(prompts: Batch, answers: list[Completion], sampling: SamplingParams, pad_id: int) -> Batch:
    """The batch call's output from one :class:`Completion` per prompt row (the inverse of
    :func:`completions`): ``prompts`` repeated ``n`` times, ``responses`` right-padded with
    ``pad_id``, ``response_mask``, ``rollout_log_probs`` (left out when any answer has none), and
    the ``meta`` the :meth:`~rlloom.protocols.RolloutEngine.generate` contract names."""
    rows = [(ids, None if a.log_probs is None else a.log_probs[j])
            for a in answers for j, ids in enumerate(a.token_ids)]
    width = max((len(ids) for ids, _ in rows), default=0)
    responses = torch.full((len(rows), width), pad_id, dtype=torch.long)
    mask = torch.zeros((len(rows), width), dtype=torch.long)
    log_probs = torch.zeros((len(rows), width), dtype=torch.float32)
    for r, (ids, row_log_probs) in enumerate(rows):
        responses[r, : len(ids)] = torch.tensor(ids, dtype=torch.long)
        mask[r, : len(ids)] = 1
        if row_log_probs is not None:
            log_probs[r, : len(ids)] = torch.tensor(row_log_probs, dtype=torch.float32)
    out = prompts.repeat(sampling.n)
    out["responses"], out["response_mask"] = responses, mask
    if all(a.log_probs is not None for a in answers):
        out["rollout_log_probs"] = log_probs
    out.meta["temperature"] = sampling.policy_temperature
    out.meta["pad_token_id"] = pad_id
    return out


def _answer_early(requests: list[_Request], sampling: SamplingParams, loop: asyncio.AbstractEventLoop) -> PromptRows:
    """The ``finished`` callback of a :class:`~rlloom_enginekit.stream.StreamsRows` engine's call for ``requests``:
    once request ``i``'s ``n`` rows are reported, its future gets their completion at once, from the engine's
    thread through ``loop``, rather than when the call's longest row ends (the completion :func:`completions`
    gives it then)."""

    def answer(prompt: int, tokens: list[list[int]], log_probs: list[list[float]]) -> None:
        reasons = [finish_reason(len(ids), sampling.max_new_tokens) for ids in tokens]
        loop.call_soon_threadsafe(_settle, requests[prompt].future, Completion(tokens, log_probs, reasons))

    return PromptRows(sampling.n, answer)


def _settle(future: asyncio.Future, answer: Completion) -> None:
    if not future.done():
        future.set_result(answer)


def _flag_if_cancelled(flags: torch.Tensor, row: int, future: asyncio.Future) -> None:
    """A done callback: set ``flags[row]`` when ``future`` was cancelled."""
    if future.cancelled():
        flags[row] = True


class BatchingScheduler:
    """``generate_one`` over ``engine.generate`` (see the module doc).

    - ``max_batch_prompts``: most prompts in one generate call.
    - ``max_wait_s``: how long the worker waits after the first request of a batch for others.
    A scheduler belongs to the event loop of its first request; :meth:`close` stops its thread.
    """

    def __init__(self, engine: RolloutEngine, max_batch_prompts: int = 64, max_wait_s: float = 0.005) -> None:
        if max_batch_prompts < 1:
            raise ValueError(f"max_batch_prompts must be >= 1, got {max_batch_prompts}")
        self.engine = engine
        self.max_batch_prompts = max_batch_prompts
        self.max_wait_s = max_wait_s
        self.generate_calls = 0
        self._executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix="rlloom-rollout")
        self._queue: list[_Request] = []
        self._arrived: asyncio.Event | None = None
        self._worker: asyncio.Task | None = None
        self._unpaused = asyncio.Event()
        self._unpaused.set()
        self._round: list[_Request] = []  # the requests taken from the queue for the calls being run
        self._running: tuple[list[_Request], torch.Tensor] | None = None  # the call in flight and its flags

    async def generate_one(self, prompt_ids: list[int], sampling: SamplingParams, response_index: int = 0
                           ) -> Completion:
        """Contract: :meth:`rlloom.protocols.AsyncRolloutEngine.generate_one`; ``response_index``: the index of
        its first response (:data:`~rlloom_enginekit.prompts.RESPONSE_INDEX_FIELD`, for an engine with
        :class:`~rlloom.protocols.BatchesRequests`)."""
        if not prompt_ids:
            raise ValueError("generate_one: the prompt needs at least one token")
        future = asyncio.get_running_loop().create_future()
        self._queue.append(_Request(list(prompt_ids), sampling, future, response_index))
        self._start_worker()
        self._arrived.set()
        return await future

    async def run_exclusive(self, fn: Callable[..., T], *args: Any) -> T:
        """``fn(*args)`` on the engine's thread, between generate calls."""
        return await asyncio.get_running_loop().run_in_executor(self._executor, fn, *args)

    async def pause(self) -> None:
        """Start no generate call until :meth:`resume`; returns once the call running, if any, has
        ended (its requests answered). Requests queued or arriving meanwhile wait."""
        self._unpaused.clear()
        await self.run_exclusive(lambda: None)  # queued behind the running call, if any

    def withdraw(self) -> None:
        """Answer every request now: the call in flight stops its rows within a decode step (an engine that flags
        the rows it withdrew, :class:`~rlloom_enginekit.partial.Interruptible`; another runs to its end) and its
        requests get their tokens so far, finished by ``"abort"``; each request not yet in a call gets no tokens,
        ``"abort"``."""
        running = {id(request) for request in self._running[0]} if self._running else set()
        if self._running:
            self._running[1].fill_(True)
        for request in self._queue + self._round:
            if id(request) not in running and not request.future.done():
                n = request.sampling.n
                request.future.set_result(Completion([[]] * n, [[]] * n, ["abort"] * n))

    def resume(self) -> None:
        """Undo :meth:`pause`: the waiting requests are batched and run."""
        self._unpaused.set()

    def _start_worker(self) -> None:
        if self._worker is None or self._worker.done():
            self._arrived = asyncio.Event()
            self._worker = asyncio.get_running_loop().create_task(self._work())

    async def _work(self) -> None:
        while True:
            await self._arrived.wait()
            await asyncio.sleep(self.max_wait_s)
            self._arrived.clear()
            waiting, self._queue = [r for r in self._queue if not r.future.done()], []
            self._round = waiting
            groups: dict[tuple[SamplingParams, bool], list[_Request]] = {}
            for request in waiting:
                groups.setdefault(self._group(request.sampling), []).append(request)
            for (sampling, _seeded), requests in groups.items():
                for start in range(0, len(requests), self.max_batch_prompts):
                    await self._unpaused.wait()
                    await self._run_batch(sampling, requests[start : start + self.max_batch_prompts])

    def _group(self, sampling: SamplingParams) -> tuple[SamplingParams, bool]:
        """The key of the requests one call may serve together: the sampling settings but
        ``first_prompt`` (and, when the engine takes a seed per row, but ``seed``), and whether
        the request has a seed."""
        common = dataclasses.replace(sampling, first_prompt=0)
        if isinstance(self.engine, BatchesRequests):
            common = dataclasses.replace(common, seed=None)
        return common, sampling.seed is not None

    async def _run_batch(self, sampling: SamplingParams, requests: list[_Request]) -> None:
        """One engine call for ``requests``. When it fails, each request is run again alone, so a
        request the engine cannot serve fails by itself, not the requests batched with it."""
        requests = [r for r in requests if not r.future.done()]  # cancelled while earlier batches ran
        if not requests:
            return
        self.generate_calls += 1
        try:
            answers = await self._generate(sampling, requests)
        except Exception as error:
            if len(requests) > 1:
                for request in requests:
                    await self._run_batch(sampling, [request])
            elif not requests[0].future.done():
                requests[0].future.set_exception(error)
            return
        for request, answer in zip(requests, answers):
            if not request.future.done():
                request.future.set_result(answer)

    async def _generate(self, sampling: SamplingParams, requests: list[_Request]) -> list[Completion]:
        prompts, mask = left_pad([r.prompt_ids for r in requests])
        batch = Batch({"prompts": prompts, "prompt_mask": mask,
                       PROMPT_INDEX_FIELD: torch.tensor([r.sampling.first_prompt for r in requests])},
                      batch_size=len(requests))
        if not isinstance(self.engine, BatchesRequests):
            if any(r.response_index for r in requests):
                raise ValueError(f"response_index: the engine {type(self.engine).__name__} keys every response by "
                                 "its place in its request (it takes no per-row fields)")
            out = await self.run_exclusive(self.engine.generate, batch, sampling)
            return completions(out, sampling.n, sampling.max_new_tokens)
        if requests[0].sampling.seed is not None:
            sampling = dataclasses.replace(sampling, seed=requests[0].sampling.seed)
            batch[SEED_FIELD] = torch.tensor([r.sampling.seed for r in requests], dtype=torch.long)
        batch[RESPONSE_INDEX_FIELD] = torch.tensor([r.response_index for r in requests], dtype=torch.long)
        cancelled = torch.zeros(len(requests), dtype=torch.bool)
        for row, request in enumerate(requests):
            request.future.add_done_callback(functools.partial(_flag_if_cancelled, cancelled, row))
        streams = isinstance(self.engine, StreamsRows)
        early = (_answer_early(requests, sampling, asyncio.get_running_loop()),) if streams else ()
        self._running = (requests, cancelled)
        try:
            out = await self.run_exclusive(self.engine.generate_requests, batch, sampling, cancelled, *early)
        finally:
            self._running = None
        return completions(out, sampling.n, sampling.max_new_tokens)

    def close(self) -> None:
        """Stop the worker and the engine's thread (the engine itself stays open)."""
        if self._worker is not None:
            self._worker.cancel()
            self._worker = None
        self._executor.shutdown(wait=True, cancel_futures=True)
