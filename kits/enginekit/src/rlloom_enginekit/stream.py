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
response index, its tokens so far), also for a row that has none yet), so that new prompts start in the slots
that finished rows left. Each group then also carries ``weight_version`` (per response, the oldest weights
that sampled one of its tokens) and ``weight_version_max`` (the newest), and ``meta["metrics"]``
``async/interrupted`` (its responses withdrawn at least once) and ``async/resumed`` (their resumptions).
"""

from __future__ import annotations

import dataclasses
import functools
from collections.abc import Callable
from typing import Optional, Protocol, runtime_checkable

import torch
import torch.nn.functional as F

from rlloom.batch import PROMPT_INDEX_FIELD, SEED_FIELD, Batch
from rlloom.types import SamplingParams
from rlloom_enginekit.partial import INTERRUPTED_FIELD, VERSION_FIELD, VERSION_MAX_FIELD, WeightGate, resumed_seed
from rlloom_enginekit.prompts import left_pad, prompt_token_lists


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
    :data:`~rlloom.batch.PROMPT_INDEX_FIELD`, else its place in its job); ``first_prompt`` 0."""
    parts = []
    for prompts, params in jobs:
        if dataclasses.replace(params, seed=None) != dataclasses.replace(jobs[0][1], seed=None):
            raise ValueError("generate_groups: the jobs' sampling differs beyond the seed")
        part = prompts.select("prompts", "prompt_mask")
        part[SEED_FIELD] = torch.full((len(prompts),), params.seed, dtype=torch.long)
        part[PROMPT_INDEX_FIELD] = prompts.get(PROMPT_INDEX_FIELD, torch.arange(len(prompts), dtype=torch.long))
        parts.append(part)
    return Batch.concat_padded(parts), dataclasses.replace(jobs[0][1], seed=0, first_prompt=0)


def group_batch(prompts: Batch, row: int, tokens: list[list[int]], log_probs: list[list[float]],
                sampling: SamplingParams, pad_id: int) -> Batch:
    """Prompt ``row`` of ``prompts`` repeated once per response, with the responses (module docstring)."""
    width = max(len(ids) for ids in tokens)

    def padded(values: list[list], fill: float, dtype: torch.dtype) -> torch.Tensor:
        return torch.stack([F.pad(torch.tensor(row, dtype=dtype), (0, width - len(row)), value=fill) for row in values])

    group = prompts.exclude(PROMPT_INDEX_FIELD).reorder([row] * len(tokens))
    group["responses"] = padded(tokens, pad_id, torch.long)
    group["response_mask"] = padded([[1] * len(ids) for ids in tokens], 0, torch.long)
    group["rollout_log_probs"] = padded(log_probs, 0.0, torch.float32)
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
    but for the seed, every seed set. With ``gate``: partial rollouts, new jobs joining (:class:`_Pool`)."""
    if gate is not None:
        _Pool(engine, jobs, send, gate).run()
        return
    call, sampling = merged(jobs)
    n = sampling.n
    owners = [(job, row) for job, (prompts, _) in enumerate(jobs) for row in range(len(prompts))]
    done: dict[int, dict[int, tuple[list[int], list[float]]]] = {}

    def finished(rows: list[int], tokens: list[list[int]], log_probs: list[list[float]]) -> None:
        for out_row, ids, values in zip(rows, tokens, log_probs):
            prompt, copy = divmod(out_row, n)
            responses = done.setdefault(prompt, {})
            responses[copy] = (ids, values)
            if len(responses) == n:
                job, row = owners[prompt]
                ordered = [responses[k] for k in range(n)]
                send(job, row, group_batch(jobs[job][0], row, [r[0] for r in ordered], [r[1] for r in ordered],
                                           jobs[job][1], engine.pad_id))

    engine.generate_requests(call, sampling, None, finished)
    missing = len(owners) - sum(len(responses) == n for responses in done.values())
    if missing:
        raise RuntimeError(f"generate_groups: the engine reported {missing} prompt(s) unfinished")


@dataclasses.dataclass
class _Row:
    """One response of a pooled generation: its job, prompt row and response index, and what it has so far."""

    job: int
    prompt: int
    copy: int
    tokens: list[int] = dataclasses.field(default_factory=list)
    log_probs: list[float] = dataclasses.field(default_factory=list)
    versions: list[int] = dataclasses.field(default_factory=list)  # the weights of each piece appended
    resumed: int = 0  # the times it was withdrawn and resumed
    done: bool = False


class _Pool:
    """The rows of the jobs of a gated :func:`generate_groups`, run in calls that new weights or new jobs
    withdraw (module docstring)."""

    def __init__(self, engine: StreamsRows, jobs: list[tuple[Batch, SamplingParams]], send: Send,
                 gate: StreamGate) -> None:
        self.engine, self.jobs, self.send, self.gate = engine, [], send, gate
        self.rows: list[_Row] = []
        self.join(jobs)

    def join(self, jobs: list[tuple[Batch, SamplingParams]]) -> None:
        for prompts, params in jobs:
            self.jobs.append((prompts, params, prompt_token_lists(prompts["prompts"], prompts["prompt_mask"])))
            job = len(self.jobs) - 1
            self.rows += [_Row(job, row, copy) for row in range(len(prompts)) for copy in range(params.n)]

    def run(self) -> None:
        """Calls until every row is done: after a withdrawn call, the waiting weights swapped, the waiting jobs
        joined."""
        while pending := [row for row in self.rows if not row.done]:
            call, sampling = self._call(pending)
            cancelled = torch.zeros(len(pending), dtype=torch.bool)
            self.gate.watch(cancelled)
            try:
                finished = functools.partial(self._finished, pending)
                out = self.engine.generate_requests(call, sampling, cancelled, finished)
            finally:
                self.gate.watch(None)
            lengths = out["response_mask"].sum(dim=1).tolist()
            for index in out[INTERRUPTED_FIELD].nonzero().squeeze(1).tolist():
                pending[index].resumed += 1
                self._append(pending[index], out["responses"][index, : lengths[index]].tolist(),
                             out["rollout_log_probs"][index, : lengths[index]].tolist(), stopped=False)
            if bool(out[INTERRUPTED_FIELD].any()):
                self.gate.swap()
                self.join(self.gate.more())

    def _call(self, pending: list[_Row]) -> tuple[Batch, SamplingParams]:
        """One row per pending response: its prompt then its tokens so far, its prompt index, its resumed seed;
        ``n = 1``, the budget the largest left."""
        ids, mask = left_pad([self.jobs[row.job][2][row.prompt] + row.tokens for row in pending])
        indices, seeds = [], []
        for row in pending:
            prompts, params, _ = self.jobs[row.job]
            own = prompts[PROMPT_INDEX_FIELD][row.prompt] if PROMPT_INDEX_FIELD in prompts else row.prompt
            indices.append(int(own))
            seeds.append(resumed_seed(params.seed, row.copy, len(row.tokens)))
        call = Batch({"prompts": ids, "prompt_mask": mask, PROMPT_INDEX_FIELD: torch.tensor(indices),
                      SEED_FIELD: torch.tensor(seeds)})
        params = self.jobs[pending[0].job][1]
        budget = max(params.max_new_tokens - len(row.tokens) for row in pending)
        return call, dataclasses.replace(params, n=1, seed=0, first_prompt=0, max_new_tokens=budget)

    def _finished(self, pending: list[_Row], rows: list[int], tokens: list[list[int]],
                  values: list[list[float]]) -> None:
        """The engine's ``finished``: ``rows`` of the call (places in ``pending``) stopped."""
        for index, ids, log_probs in zip(rows, tokens, values):
            self._append(pending[index], ids, log_probs, stopped=True)

    def _append(self, row: _Row, tokens: list[int], log_probs: list[float], stopped: bool) -> None:
        """Append a call's tokens to ``row`` (cut at its budget); the row is done once it stopped or its budget is
        spent, and its group is sent once all its responses are."""
        prompts, params, _ = self.jobs[row.job]
        take = params.max_new_tokens - len(row.tokens)
        if tokens[:take]:
            row.tokens += tokens[:take]
            row.log_probs += log_probs[:take]
            row.versions.append(self.gate.version)
        row.done = stopped or len(row.tokens) >= params.max_new_tokens
        group = [other for other in self.rows if other.job == row.job and other.prompt == row.prompt]
        if row.done and all(other.done for other in group):
            batch = group_batch(prompts, row.prompt, [other.tokens for other in group],
                                [other.log_probs for other in group], params, self.engine.pad_id)
            batch[VERSION_FIELD] = torch.tensor([min(other.versions, default=self.gate.version) for other in group])
            batch[VERSION_MAX_FIELD] = torch.tensor([max(other.versions, default=self.gate.version) for other in group])
            batch.meta["metrics"] = {"async/interrupted": float(sum(other.resumed > 0 for other in group)),
                                     "async/resumed": float(sum(other.resumed for other in group))}
            self.send(row.job, row.prompt, batch)
