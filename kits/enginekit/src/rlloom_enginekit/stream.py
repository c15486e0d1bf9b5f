"""Streamed generation: the finished *groups* (all ``n`` responses of one prompt) of one or more jobs handed
on as they complete, not when the longest row of the call ends (docs/async.md, ``trainer.stream_groups``).

:func:`generate_groups` runs the jobs' prompts as ONE ``engine.generate_requests`` call of a
:class:`StreamsRows` engine, each prompt row keeping the randomness its own job's call would give it (its
job's seed as the row's :data:`~rlloom.batch.SEED_FIELD`, its place in its job as its
:data:`~rlloom.batch.PROMPT_INDEX_FIELD`), and calls ``send(job, row, group)`` the moment the ``n``-th
response of a prompt is done. A group is what the job's own ``generate`` would have returned for that prompt
row: the job's prompt fields repeated ``n`` times, ``responses`` / ``response_mask`` / ``rollout_log_probs``
right-padded to the group's longest response, ``meta`` ``temperature`` and ``pad_token_id``.

With partial rollouts (:func:`generate_groups` given a :class:`StreamGate`, the rollout process), the call is
withdrawn when new weights wait *or* new jobs wait: the weights are swapped, the waiting jobs join, and every
unfinished row resumes, as in :func:`rlloom_enginekit.partial.generate_partial` (prompt + tokens so far, its
budget reduced, a seed of its own: :func:`~rlloom_enginekit.partial.resumed_seed` keyed by (its seed, its
response index, its tokens so far); a row with no token yet draws what its job's own call would), so that new
prompts start in the slots that finished rows left. Each group then also carries ``weight_version`` (per
response, the oldest weights that sampled one of its tokens) and ``weight_version_max`` (the newest), and
``meta["metrics"]`` ``async/interrupted`` (its responses withdrawn at least once) and ``async/resumed`` (their
resumptions).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Optional, Protocol, runtime_checkable

import torch

from rlloom.batch import PROMPT_INDEX_FIELD, SEED_FIELD, Batch
from rlloom.types import SamplingParams
from rlloom_enginekit.partial import PartialPool, PartialRow, WeightGate, padded_rows, responses_batch, withdrawals
from rlloom_enginekit.prompts import prompt_indices


@runtime_checkable
class StreamsRows(Protocol):
    """A rollout engine whose ``generate_requests(prompts, sampling, cancelled, finished)`` calls
    ``finished(rows, tokens, log_probs)`` with output rows as they are done, before the call returns, each row
    once (withdrawn rows never); it says so with ``reports_finished_rows = True``. ``pad_id`` pads responses."""

    reports_finished_rows: bool
    pad_id: int

    def generate_requests(self, prompts: Batch, sampling: SamplingParams, cancelled: Optional[torch.Tensor] = None,
                          finished: Optional[Callable] = None) -> Batch: ...


Send = Callable[[int, int, Batch], None]
"""``send(job, row, group)``: prompt ``row`` of job ``job`` (their places in the call's lists) is finished."""


def merged(jobs: list[tuple[Batch, SamplingParams]]) -> tuple[Batch, SamplingParams]:
    """One call for ``jobs`` (their prompts and sampling, equal but for the seed; every seed set): the prompts
    left-padded to the widest, each row with its job's seed and its prompt index (its job's
    :data:`~rlloom.batch.PROMPT_INDEX_FIELD`, else the job's ``first_prompt`` + its place in its job:
    :func:`~rlloom_enginekit.prompts.prompt_indices`); ``first_prompt`` 0."""
    parts = []
    for prompts, params in jobs:
        if dataclasses.replace(params, seed=None) != dataclasses.replace(jobs[0][1], seed=None):
            raise ValueError("generate_groups: the jobs' sampling differs beyond the seed")
        part = prompts.select("prompts", "prompt_mask")
        part[SEED_FIELD] = torch.full((len(prompts),), params.seed, dtype=torch.long)
        part[PROMPT_INDEX_FIELD] = prompt_indices(prompts, params.first_prompt)
        parts.append(part)
    return Batch.concat_padded(parts), dataclasses.replace(jobs[0][1], seed=0, first_prompt=0)


def group_batch(prompts: Batch, row: int, tokens: list[list[int]], log_probs: list[list[float]],
                sampling: SamplingParams, pad_id: int) -> Batch:
    """Prompt ``row`` of ``prompts`` repeated once per response, with the responses (module docstring)."""
    group = prompts.exclude(PROMPT_INDEX_FIELD).reorder([row] * len(tokens))
    group["responses"] = padded_rows(tokens, pad_id, torch.long)
    group["response_mask"] = padded_rows([[1] * len(ids) for ids in tokens], 0, torch.long)
    group["rollout_log_probs"] = padded_rows(log_probs, 0.0, torch.float32)
    group.meta.update(temperature=sampling.policy_temperature, pad_token_id=pad_id)
    return group


class StreamGate(WeightGate, Protocol):
    """A :class:`~rlloom_enginekit.partial.WeightGate` whose ``watch(cancelled)`` also sets the flags once new
    jobs wait, and ``more()`` hands those jobs over (their prompts and sampling)."""

    def more(self) -> list[tuple[Batch, SamplingParams]]: ...


def generate_groups(engine: StreamsRows, jobs: list[tuple[Batch, SamplingParams]], send: Send,
                    gate: StreamGate | None = None) -> None:
    """Generate every prompt row of ``jobs`` in one engine call, ``send``-ing each group as it completes (its
    ``n``-th response done; module docstring); returns once every group was sent. The jobs' sampling is equal
    but for the seed, every seed set. With ``gate``: partial rollouts, new jobs joining (:func:`_pooled`)."""
    if gate is not None:
        _pooled(engine, jobs, send, gate)
        return
    call, sampling = merged(jobs)
    owners = [(job, row) for job, (prompts, _) in enumerate(jobs) for row in range(len(prompts))]

    def whole(prompt: int, tokens: list[list[int]], log_probs: list[list[float]]) -> None:
        job, row = owners[prompt]
        send(job, row, group_batch(jobs[job][0], row, tokens, log_probs, jobs[job][1], engine.pad_id))

    finished = PromptRows(sampling.n, whole)
    engine.generate_requests(call, sampling, None, finished)
    missing = len(owners) - finished.whole
    if missing:
        raise RuntimeError(f"generate_groups: the engine reported {missing} prompt(s) unfinished")


class PromptRows:
    """The ``finished(rows, tokens, log_probs)`` callback of a :class:`StreamsRows` call with ``n`` responses per
    prompt: once the ``n`` output rows of prompt ``i`` (rows ``i * n`` to ``i * n + n - 1``) are all reported,
    ``on_whole(i, tokens, log_probs)`` gets them in response order; ``whole`` counts those prompts."""

    def __init__(self, n: int, on_whole: Callable[[int, list[list[int]], list[list[float]]], None]) -> None:
        self.n, self.on_whole, self.whole = n, on_whole, 0
        self._reported: dict[int, dict[int, tuple[list[int], list[float]]]] = {}

    def __call__(self, rows: list[int], tokens: list[list[int]], log_probs: list[list[float]]) -> None:
        for out_row, ids, values in zip(rows, tokens, log_probs):
            prompt, copy = divmod(out_row, self.n)
            responses = self._reported.setdefault(prompt, {})
            responses[copy] = (ids, values)
            if len(responses) == self.n:
                self.whole += 1
                ordered = [responses[k] for k in range(self.n)]
                self.on_whole(prompt, [ids for ids, _ in ordered], [values for _, values in ordered])


def _pooled(engine: StreamsRows, jobs: list[tuple[Batch, SamplingParams]], send: Send, gate: StreamGate) -> None:
    """The gated :func:`generate_groups`: the jobs' rows in a :class:`~rlloom_enginekit.partial.PartialPool` that new
    weights or new jobs withdraw (the gate's ``watch``), the jobs ``gate.more()`` hands over joining; each group sent
    with its responses' versions once its last response is done."""
    pool: PartialPool

    def done(row: PartialRow) -> None:
        group = [other for other in pool.rows if other.job == row.job and other.prompt == row.prompt]
        if all(other.done for other in group):
            job = pool.jobs[row.job]
            pool.forget(group)
            batch = responses_batch(job.prompts.exclude(PROMPT_INDEX_FIELD), group, job.sampling, engine.pad_id,
                                    gate.version)
            batch.meta["metrics"] = withdrawals(group)
            send(row.job, row.prompt, batch)

    pool = PartialPool(engine, jobs, gate, done, joins=True)
    pool.run()
