"""Partial (interruptible) rollouts: a generation paused for new weights and resumed from the prompt and the
tokens so far, so that a weight update never waits for the generation in flight (docs/async.md).

:func:`generate_partial` runs ``engine.generate_requests`` (an :class:`Interruptible` engine) with a
``cancelled`` tensor the host (:class:`WeightGate`: the rollout process) sets once new weights wait. The rows
withdrawn before they stopped on their own, with budget left, are resumed after the swap: each from its
prompt followed by its tokens so far, as one row (``n = 1``) whose budget is ``max_new_tokens`` minus those
tokens. The resumed tokens and their log-probs (under the new weights) are appended, a resumed row that
runs past its budget is cut at it (a token never depends on later ones, so this equals stopping there), and
the loop repeats while updates keep arriving. The caller gets one batch as from ``generate``: every row at
most ``max_new_tokens`` tokens, ``rollout_log_probs`` as long as ``responses``, and each row's versions:
``weight_version`` the oldest weights that sampled one of its tokens, ``weight_version_max`` the newest.

A resumed row's randomness: with a seed (the call's or the row's ``sampling_seed``) it draws from a stream
keyed by (its seed, its response index, its tokens so far) through :func:`resumed_seed`, a stream that its
earlier draws never used; unseeded, the engine draws a seed. Its prompt index is its prompt's.
"""

from __future__ import annotations

import dataclasses
from typing import Optional, Protocol, runtime_checkable

import numpy as np
import torch
import torch.nn.functional as F

from rlloom.batch import PROMPT_INDEX_FIELD, SEED_FIELD, Batch
from rlloom.types import SamplingParams
from rlloom_enginekit.prompts import left_pad, prompt_indices, prompt_token_lists, row_seeds

INTERRUPTED_FIELD = "interrupted"
"""[N] bool output of an :class:`Interruptible` engine's ``generate_requests``: withdrawn before it stopped."""

VERSION_FIELD, VERSION_MAX_FIELD = "weight_version", "weight_version_max"


@runtime_checkable
class Interruptible(Protocol):
    """A rollout engine whose ``generate_requests(prompts, sampling, cancelled)`` (the
    :class:`rlloom.protocols.BatchesRequests` contract) also returns :data:`INTERRUPTED_FIELD`: the rows
    ``cancelled`` withdrew before they emitted a stop id or reached ``max_new_tokens``; it says so with
    ``flags_interrupted_rows = True``."""

    flags_interrupted_rows: bool

    def generate_requests(self, prompts: Batch, sampling: SamplingParams,
                          cancelled: Optional[torch.Tensor] = None) -> Batch: ...


class WeightGate(Protocol):
    """The host of a partial generation: ``version``, the version of the weights the engine holds now;
    ``watch(cancelled)`` sets ``cancelled`` [B] all True as soon as new weights wait (at once when they
    already do; ``None``: stop watching); ``swap()`` loads the waiting weights (``version`` follows)."""

    version: int

    def watch(self, cancelled: Optional[torch.Tensor]) -> None: ...

    def swap(self) -> None: ...


@dataclasses.dataclass
class _Rows:
    """The rows of a partial generation while it runs: tokens, log-probs and versions so far."""

    tokens: list[list[int]]
    log_probs: list[list[float]]
    oldest: list[int | None]
    newest: list[int | None]
    interrupted: set[int] = dataclasses.field(default_factory=set)
    resumed: int = 0

    def append(self, row: int, tokens: list[int], log_probs: list[float], version: int) -> None:
        if tokens:
            self.tokens[row] += tokens
            self.log_probs[row] += log_probs
            self.oldest[row] = version if self.oldest[row] is None else self.oldest[row]
            self.newest[row] = version


def resumed_seed(seed: int, copy: int, done: int) -> int:
    """The seed of response ``copy`` resumed after ``done`` tokens: ``SeedSequence([seed, copy, done])``'s
    first 63 bits."""
    return int(np.random.SeedSequence([seed, copy, done]).generate_state(1, np.uint64)[0]) >> 1


def generate_partial(engine: Interruptible, prompts: Batch, sampling: SamplingParams, gate: WeightGate) -> Batch:
    """``engine.generate(prompts, sampling)``, paused for each weight update the gate announces and resumed
    (module doc). ``out.meta["metrics"]``: ``async/interrupted`` (rows withdrawn at least once) and
    ``async/resumed`` (row resumptions)."""
    n, budget = sampling.n, sampling.max_new_tokens
    rows = len(prompts) * n
    state = _Rows([[] for _ in range(rows)], [[] for _ in range(rows)], [None] * rows, [None] * rows)
    out = part = _run(engine, prompts, sampling, gate)
    pending = list(range(rows))
    while True:
        lengths = part["response_mask"].sum(dim=1).tolist()
        for index, row in enumerate(pending):
            take = min(lengths[index], budget - len(state.tokens[row]))
            state.append(row, part["responses"][index, :take].tolist(),
                         part["rollout_log_probs"][index, :take].tolist(), gate.version)
        cut = part[INTERRUPTED_FIELD].tolist()
        pending = [row for index, row in enumerate(pending) if cut[index] and len(state.tokens[row]) < budget]
        if not pending:
            return _assembled(out, state, gate.version, int(out.meta.get("pad_token_id", 0)))
        state.interrupted.update(pending)
        state.resumed += len(pending)
        gate.swap()
        part = _run(engine, *_resumption(prompts, sampling, pending, state), gate)


def _run(engine: Interruptible, prompts: Batch, sampling: SamplingParams, gate: WeightGate) -> Batch:
    """One ``generate_requests`` call, withdrawn once new weights wait."""
    cancelled = torch.zeros(len(prompts), dtype=torch.bool)
    gate.watch(cancelled)
    try:
        return engine.generate_requests(prompts, sampling, cancelled)
    finally:
        gate.watch(None)


def _resumption(prompts: Batch, sampling: SamplingParams, pending: list[int], state: _Rows) -> tuple[Batch, SamplingParams]:
    """The call that resumes the ``pending`` output rows: one prompt each, its prompt's tokens then the row's
    tokens so far, its prompt index, and (seeded) its :func:`resumed_seed`; ``n = 1``, the budget the
    longest remaining one."""
    n = sampling.n
    owners = [row // n for row in pending]
    texts = prompt_token_lists(prompts["prompts"], prompts["prompt_mask"])
    ids, mask = left_pad([texts[owner] + state.tokens[row] for owner, row in zip(owners, pending)])
    call = Batch({"prompts": ids, "prompt_mask": mask,
                  PROMPT_INDEX_FIELD: prompt_indices(prompts, sampling.first_prompt)[owners]}, batch_size=len(pending))
    seeded = sampling.seed is not None or SEED_FIELD in prompts
    if seeded:
        seeds = row_seeds(prompts, sampling.seed if sampling.seed is not None else 0)[owners].tolist()
        call[SEED_FIELD] = torch.tensor([resumed_seed(seed, row % n, len(state.tokens[row]))
                                         for seed, row in zip(seeds, pending)], dtype=torch.long)
    remaining = max(sampling.max_new_tokens - len(state.tokens[row]) for row in pending)
    return call, dataclasses.replace(sampling, n=1, max_new_tokens=remaining, first_prompt=0)


def _assembled(out: Batch, state: _Rows, version: int, pad_id: int) -> Batch:
    """``out`` (the first call's output: the prompts' fields, meta) with every row's spliced response,
    versions and the ``async/*`` counts."""
    width = max((len(tokens) for tokens in state.tokens), default=0)

    def padded(values: list[list], fill: float, dtype: torch.dtype) -> torch.Tensor:
        return torch.stack([F.pad(torch.tensor(row, dtype=dtype), (0, width - len(row)), value=fill)
                            for row in values]) if values else torch.zeros((0, width), dtype=dtype)

    out = out.exclude(INTERRUPTED_FIELD)
    out["responses"] = padded(state.tokens, pad_id, torch.long)
    out["response_mask"] = padded([[1] * len(tokens) for tokens in state.tokens], 0, torch.long)
    out["rollout_log_probs"] = padded(state.log_probs, 0.0, torch.float32)
    out[VERSION_FIELD] = torch.tensor([version if v is None else v for v in state.oldest], dtype=torch.long)
    out[VERSION_MAX_FIELD] = torch.tensor([version if v is None else v for v in state.newest], dtype=torch.long)
    out.meta.setdefault("metrics", {}).update({"async/interrupted": float(len(state.interrupted)),
                                               "async/resumed": float(state.resumed)})
    return out
