"""Partial (interruptible) rollouts: a generation paused for new weights and resumed from the prompt and the
tokens so far, so that a weight update never waits for the generation in flight (docs/async.md).

A :class:`PartialPool` holds the response rows of one or more jobs (a job: prompts and sampling, as one
``generate`` call) and runs them in ``engine.generate_requests`` calls (an :class:`Interruptible` engine), one
row (``n = 1``) per response with its own budget (:data:`~rlloom_enginekit.prompts.MAX_TOKENS_FIELD`), with a
``cancelled`` tensor the host (:class:`WeightGate`: a :class:`LoadGate`, the rollout process's or a Ray rollout
worker's) sets once new weights wait. The rows withdrawn before they stopped on their own, with budget left, are
resumed after the swap: each from its prompt followed by its tokens so far, its budget ``max_new_tokens`` minus
those tokens. The resumed tokens and their log-probs (under the new weights) are appended, and the loop repeats
while updates keep arriving.
:func:`generate_partial` returns one job's batch as from ``generate``;
:func:`rlloom_enginekit.stream.generate_groups` hands each group on as it completes, and lets the jobs the host
has waiting join the pool after each withdrawn call. Every row holds at most ``max_new_tokens`` tokens,
``rollout_log_probs`` as long as ``responses``, and its versions: ``weight_version`` the oldest weights that
sampled one of its tokens, ``weight_version_max`` the newest.

A row's randomness: until it has a token it draws what its job's own ``generate`` call would (its job's seed,
its prompt index, its response index: :data:`~rlloom_enginekit.prompts.RESPONSE_INDEX_FIELD`); resumed after
some tokens, from a stream keyed by (its seed, its response index, its tokens so far) through
:func:`resumed_seed`, a stream that its earlier draws never used. An unseeded job gets a seed drawn from the
operating system's entropy when it joins. Its prompt index is its prompt's.
"""

from __future__ import annotations

import contextlib
import dataclasses
import threading
from collections.abc import Callable, Iterator
from typing import Optional, Protocol, runtime_checkable

import numpy as np
import torch
import torch.nn.functional as F

from rlloom.batch import PROMPT_INDEX_FIELD, SEED_FIELD, Batch
from rlloom.types import SamplingParams
from rlloom_enginekit.prompts import (MAX_TOKENS_FIELD, RESPONSE_INDEX_FIELD, left_pad, prompt_indices,
                                      prompt_token_lists, row_seeds)

INTERRUPTED_FIELD = "interrupted"
"""[N] bool output of an :class:`Interruptible` engine's ``generate_requests``: withdrawn before it stopped."""

VERSION_FIELD, VERSION_MAX_FIELD = "weight_version", "weight_version_max"


@runtime_checkable
class Interruptible(Protocol):
    """A rollout engine whose ``generate_requests(prompts, sampling, cancelled)`` (the
    :class:`rlloom.protocols.BatchesRequests` contract) also returns :data:`INTERRUPTED_FIELD`: the rows
    ``cancelled`` withdrew before they emitted a stop id or reached ``max_new_tokens``; it says so with
    ``flags_interrupted_rows = True``. Its ``generate_requests`` also takes ``finished(rows, tokens, log_probs)``
    (:class:`rlloom_enginekit.stream.StreamsRows`: every row not withdrawn reported once done) and the prompt-row
    fields :data:`~rlloom_enginekit.prompts.RESPONSE_INDEX_FIELD` and
    :data:`~rlloom_enginekit.prompts.MAX_TOKENS_FIELD`;
    ``pad_id`` pads responses."""

    flags_interrupted_rows: bool
    pad_id: int

    def generate_requests(self, prompts: Batch, sampling: SamplingParams, cancelled: Optional[torch.Tensor] = None,
                          finished: Optional[Callable] = None) -> Batch: ...


class WeightGate(Protocol):
    """The host of a partial generation: ``version``, the version of the weights the engine holds now;
    ``watch(cancelled)`` sets ``cancelled`` [B] all True as soon as new weights wait (at once when they
    already do; ``None``: stop watching); ``swap()`` loads the waiting weights (``version`` follows)."""

    version: int

    def watch(self, cancelled: Optional[torch.Tensor]) -> None: ...

    def swap(self) -> None: ...


def check_interruptible(engine: object) -> None:
    """TypeError naming ``trainer.partial_rollout`` unless ``engine`` is an :class:`Interruptible`."""
    if not isinstance(engine, Interruptible):
        raise TypeError(f"trainer.partial_rollout=true: the rollout engine {type(engine).__name__} cannot withdraw "
                        "rows mid-generation and flag them; set it false")


@dataclasses.dataclass
class PendingLoad:
    """A weight load handed to a :class:`LoadGate`: ``apply()`` loads, ``version`` labels the weights (None: one
    more); ``done`` is set once it ran, with its ``value`` or ``error``."""

    apply: Callable[[], object]
    version: Optional[int]
    done: threading.Event = dataclasses.field(default_factory=threading.Event)
    value: object = None
    error: Optional[BaseException] = None


class LoadGate:
    """The :class:`WeightGate` (and :class:`~rlloom_enginekit.stream.StreamGate`, no job ever joining) of a host
    whose weight loads arrive on a thread other than the generation's (a Ray worker's concurrency group of its
    own; the rollout process's request reader): a load (:meth:`submit`, :meth:`load`) runs at once when no
    generation is in flight (:meth:`generating`), else flags the call in flight (:meth:`watch`) and waits until the
    generation swaps it in (:meth:`swap`, or the generation's end). Loads run one at a time, in arrival order,
    under one lock; ``version`` is the weights' label."""

    def __init__(self, version: int) -> None:
        self.version = version
        self._lock = threading.RLock()
        self._busy = False
        self._watched: Optional[torch.Tensor] = None
        self._loads: list[PendingLoad] = []

    def submit(self, apply: Callable[[], object], version: Optional[int]) -> PendingLoad:
        """Hand the load ``apply()`` over without waiting for it, the weights labelled ``version``; its ``done`` is
        set once it ran."""
        pending = PendingLoad(apply, version)
        with self._lock:
            if self._busy:
                self._loads.append(pending)
                self.interrupt()
            else:
                self._run(pending)
        return pending

    def load(self, apply: Callable[[], object], version: Optional[int]) -> object:
        """:meth:`submit`, waited for: ``apply()``'s value once it ran (its error raised here)."""
        pending = self.submit(apply, version)
        pending.done.wait()
        if pending.error is not None:
            raise pending.error
        return pending.value

    def interrupt(self) -> None:
        """Flag the call in flight, if one is watched, now (a load waits, or the host has a job to join it)."""
        with self._lock:
            if self._watched is not None:
                self._watched.fill_(True)

    @contextlib.contextmanager
    def generating(self) -> Iterator["LoadGate"]:
        """A generation in flight: loads arriving meanwhile wait for its :meth:`swap` or its end (then run)."""
        with self._lock:
            self._busy = True
        try:
            yield self
        finally:
            with self._lock:
                self.swap()
                self._busy = False

    def watch(self, cancelled: Optional[torch.Tensor]) -> None:
        with self._lock:
            self._watched = cancelled
            if cancelled is not None and self._loads:
                cancelled.fill_(True)

    def swap(self) -> None:
        with self._lock:
            loads, self._loads = self._loads, []
            for pending in loads:
                self._run(pending)

    def more(self) -> list:
        """No job joins a call in flight: each streamed job is a call of its own."""
        return []

    def _run(self, pending: PendingLoad) -> None:
        """Run ``pending`` and set its ``done`` (call under the lock)."""
        try:
            pending.value = pending.apply()
            self.version = self.version + 1 if pending.version is None else pending.version
        except BaseException as error:  # noqa: BLE001 - raised in the thread that handed the load over
            pending.error = error
        pending.done.set()


def joinable(sampling: SamplingParams, other: SamplingParams) -> bool:
    """Whether jobs of these samplings can share engine calls: equal but for the seed."""
    return dataclasses.replace(sampling, seed=None) == dataclasses.replace(other, seed=None)


def resumed_seed(seed: int, copy: int, done: int) -> int:
    """The seed of response ``copy`` resumed after ``done`` tokens: ``SeedSequence([seed, copy, done])``'s
    first 63 bits."""
    return int(np.random.SeedSequence([seed, copy, done]).generate_state(1, np.uint64)[0]) >> 1


@dataclasses.dataclass
class PartialRow:
    """One response of a :class:`PartialPool`: its job, prompt row and response index, what it has so far, the
    weights of each piece appended, and how often it was resumed."""

    job: int
    prompt: int
    copy: int
    tokens: list[int] = dataclasses.field(default_factory=list)
    log_probs: list[float] = dataclasses.field(default_factory=list)
    versions: list[int] = dataclasses.field(default_factory=list)
    resumed: int = 0
    done: bool = False


@dataclasses.dataclass
class PoolJob:
    """A job of a :class:`PartialPool`: its prompts, sampling (seeded), each prompt row's tokens, seed and prompt
    index."""

    prompts: Batch
    sampling: SamplingParams
    texts: list[list[int]]
    seeds: list[int]
    indices: list[int]


class PartialPool:
    """The rows of jobs run in calls that new weights withdraw (module doc). ``done(row)`` is called once per row,
    when it stopped or spent its budget; ``joins``: after each swap, the jobs ``gate.more()`` hands over join."""

    def __init__(self, engine: Interruptible, jobs: list[tuple[Batch, SamplingParams]], gate: WeightGate,
                 done: Callable[[PartialRow], None], joins: bool) -> None:
        self.engine, self.gate, self.done, self.joins = engine, gate, done, joins
        self.jobs: list[PoolJob] = []
        self.rows: list[PartialRow] = []
        self.join(jobs)

    def join(self, jobs: list[tuple[Batch, SamplingParams]]) -> None:
        for prompts, params in jobs:
            if self.jobs and not joinable(params, self.jobs[0].sampling):
                raise ValueError("a partial pool's jobs must sample alike but for the seed")
            if params.seed is None and SEED_FIELD not in prompts:
                params = dataclasses.replace(params, seed=int(np.random.SeedSequence().generate_state(1)[0]) >> 1)
            texts = prompt_token_lists(prompts["prompts"], prompts["prompt_mask"])
            self.jobs.append(PoolJob(prompts, params, texts, row_seeds(prompts, params.seed).tolist(),
                                     prompt_indices(prompts, params.first_prompt).tolist()))
            self.rows += [PartialRow(len(self.jobs) - 1, prompt, copy)
                          for prompt in range(len(prompts)) for copy in range(params.n)]

    def run(self) -> None:
        """Calls until every row is done: after a withdrawn call the waiting weights are swapped (and, with
        ``joins``, the waiting jobs join)."""
        while pending := [row for row in self.rows if not row.done]:
            call, sampling = self._call(pending)
            cancelled = torch.zeros(len(pending), dtype=torch.bool)
            self.gate.watch(cancelled)
            try:
                out = self.engine.generate_requests(call, sampling, cancelled, self._reported(pending))
            finally:
                self.gate.watch(None)
            lengths = out["response_mask"].sum(dim=1).tolist()
            cut = out[INTERRUPTED_FIELD].nonzero().squeeze(1).tolist()
            for index in cut:
                pending[index].resumed += 1
                self._append(pending[index], out["responses"][index, : lengths[index]].tolist(),
                             out["rollout_log_probs"][index, : lengths[index]].tolist(), stopped=False)
            if cut:
                self.gate.swap()
                if self.joins:
                    self.join(self.gate.more())

    def _reported(self, pending: list[PartialRow]) -> Callable:
        def finished(rows: list[int], tokens: list[list[int]], log_probs: list[list[float]]) -> None:
            for index, ids, values in zip(rows, tokens, log_probs):
                self._append(pending[index], ids, values, stopped=True)

        return finished

    def _call(self, pending: list[PartialRow]) -> tuple[Batch, SamplingParams]:
        """One row per pending response: its prompt then its tokens so far, its prompt index, its seed and response
        index (module doc), its budget left; ``n = 1``, the call's budget the largest left."""
        ids, mask = left_pad([self.jobs[row.job].texts[row.prompt] + row.tokens for row in pending])
        keys = []
        for row in pending:
            job = self.jobs[row.job]
            seed, fresh = job.seeds[row.prompt], not row.tokens
            keys.append((job.indices[row.prompt], seed if fresh else resumed_seed(seed, row.copy, len(row.tokens)),
                         row.copy if fresh else 0, job.sampling.max_new_tokens - len(row.tokens)))
        index, seeds, responses, budgets = (torch.tensor(column, dtype=torch.long) for column in zip(*keys))
        call = Batch({"prompts": ids, "prompt_mask": mask, PROMPT_INDEX_FIELD: index, SEED_FIELD: seeds,
                      RESPONSE_INDEX_FIELD: responses, MAX_TOKENS_FIELD: budgets})
        sampling = dataclasses.replace(self.jobs[0].sampling, n=1, seed=0, first_prompt=0,
                                       max_new_tokens=int(budgets.max()))
        return call, sampling

    def _append(self, row: PartialRow, tokens: list[int], log_probs: list[float], stopped: bool) -> None:
        """Append a call's tokens to ``row`` (cut at its budget); once it stopped or spent its budget it is done."""
        job = self.jobs[row.job]
        take = job.sampling.max_new_tokens - len(row.tokens)
        if tokens[:take]:
            row.tokens += tokens[:take]
            row.log_probs += log_probs[:take]
            row.versions.append(self.gate.version)
        if stopped or len(row.tokens) >= job.sampling.max_new_tokens:
            row.done = True
            self.done(row)

    def forget(self, rows: list[PartialRow]) -> None:
        """Drop ``rows`` (done, handed on): a pool that jobs keep joining holds only live rows."""
        gone = set(map(id, rows))
        self.rows = [row for row in self.rows if id(row) not in gone]


def padded_rows(values: list[list], fill: float, dtype: torch.dtype) -> torch.Tensor:
    """The lists as the rows of a [len(values), W] tensor, right-padded with ``fill`` to the longest, W."""
    width = max((len(row) for row in values), default=0)
    if not values:
        return torch.zeros((0, width), dtype=dtype)
    return torch.stack([F.pad(torch.tensor(row, dtype=dtype), (0, width - len(row)), value=fill) for row in values])


def responses_batch(prompts: Batch, rows: list[PartialRow], sampling: SamplingParams, pad_id: int,
                    version: int) -> Batch:
    """``prompts`` repeated once per row (``prompts.reorder`` of the rows' prompt rows) with the rows'
    ``responses`` / ``response_mask`` / ``rollout_log_probs`` right-padded to the longest, their versions
    (``version`` for a row with no token) and ``meta`` ``temperature`` and ``pad_token_id``."""
    out = prompts.reorder([row.prompt for row in rows])
    out["responses"] = padded_rows([row.tokens for row in rows], pad_id, torch.long)
    out["response_mask"] = padded_rows([[1] * len(row.tokens) for row in rows], 0, torch.long)
    out["rollout_log_probs"] = padded_rows([row.log_probs for row in rows], 0.0, torch.float32)
    out[VERSION_FIELD] = torch.tensor([min(row.versions, default=version) for row in rows], dtype=torch.long)
    out[VERSION_MAX_FIELD] = torch.tensor([max(row.versions, default=version) for row in rows], dtype=torch.long)
    out.meta.update(temperature=sampling.policy_temperature, pad_token_id=pad_id)
    return out


def withdrawals(rows: list[PartialRow]) -> dict[str, float]:
    """``async/interrupted`` (the rows withdrawn at least once) and ``async/resumed`` (their resumptions)."""
    return {"async/interrupted": float(sum(row.resumed > 0 for row in rows)),
            "async/resumed": float(sum(row.resumed for row in rows))}


def summed(counts: list[dict[str, float]]) -> dict[str, float]:
    """Key by key, the sums of several counts (:func:`withdrawals` of the pieces of one batch); a key missing from
    one counts 0 there."""
    return {key: sum(count.get(key, 0.0) for count in counts)
            for key in dict.fromkeys(key for count in counts for key in count)}


def generate_partial(engine: Interruptible, prompts: Batch, sampling: SamplingParams, gate: WeightGate) -> Batch:
    """``engine.generate(prompts, sampling)``, paused for each weight update the gate announces and resumed
    (module doc). ``out.meta["metrics"]``: ``async/interrupted`` (rows withdrawn at least once) and
    ``async/resumed`` (row resumptions)."""
    pool = PartialPool(engine, [(prompts, sampling)], gate, lambda _row: None, joins=False)
    pool.run()
    out = responses_batch(prompts, pool.rows, pool.jobs[0].sampling, engine.pad_id, gate.version)
    out.meta["metrics"] = withdrawals(pool.rows)
    return out
