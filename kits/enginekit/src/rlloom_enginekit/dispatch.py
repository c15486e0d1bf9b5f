"""The data-parallel dispatch modes (:mod:`rlloom.controller.dispatch` has the contract, the
decorator engines declare a method's mode with, and the core's ``one_to_all`` / ``rank_zero``);
registered by this kit's entry point under these names:

- ``dp_split``: the first argument, a :class:`~rlloom.batch.Batch` of ``n`` rows, is padded to a
  multiple of ``world_size`` by repeating its last row and cut into equal consecutive pieces (rank
  ``i`` gets piece ``i``); returned batches are concatenated in rank order and the padding rows
  dropped, so the caller sees exactly ``n`` rows in order. For row-wise computations (log-probs,
  values), where padding rows cost a little time and change nothing.
- ``dp_split_uneven``: as ``dp_split`` but without padding: piece sizes differ by at most one row.
  For train steps, where padding rows would change the loss normalisation; the engine must accept
  ranks holding unequal row counts.
- ``dp_split_tokens``: as ``dp_split_uneven``, but the pieces balance real tokens (``prompt_mask``
  + ``response_mask``), not rows (:func:`balanced_partition`, sorted greedy over runs of rows that
  share a prompt, so a rank still runs a shared prompt once); each rank keeps its rows in batch
  order, and returned batches are put back in the caller's order (a batch without those fields is
  cut as ``dp_split_uneven``). The default of ``train_step``: with responses of very different
  lengths, equal rows leave ranks waiting on the longest piece.
- ``dp_split_rollout``: for ``generate(prompts, sampling)``: the prompt rows are cut as in
  ``dp_split_uneven``, except that ranks beyond the number of prompts sit out; each piece is
  generated with ``sampling.first_prompt`` set to its first prompt's index in the whole call, so
  engines (which draw each response's randomness from seed, prompt index and response index)
  sample exactly what one process would; the responses (``n`` per prompt, interleaved) are
  concatenated in rank order, right-padded to the longest with the engine's
  ``meta["pad_token_id"]``; the pieces' ``meta["metrics"]`` are counts (partial rollouts'
  ``async/interrupted`` and ``async/resumed``), summed.

For ``dp_split*`` a result that is not a batch (a train step's metrics, already all-reduced by the
engine) comes from rank 0. A batch with fewer rows than ranks is refused.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Any

import torch
from rlloom.batch import Batch, row_tokens
from rlloom.types import RankCall, SamplingParams
from rlloom_enginekit.partial import summed


class DataParallelSplit:
    """Rank ``i`` gets the ``i``-th consecutive piece of the batch; batches come back concatenated.

    ``pad``: pad to a multiple of the world size by repeating the last row (pieces of equal size)
    and drop the padding from the concatenated result; without it pieces differ by at most one row.
    """

    def __init__(self, pad: bool = True) -> None:
        self.pad = pad

    def scatter(self, args: tuple, kwargs: dict, world_size: int) -> list[RankCall | None]:
        batch, rest = args[0], args[1:]
        if not isinstance(batch, Batch):
            raise TypeError(f"a data-parallel split needs a Batch as first argument, got {type(batch).__name__}")
        if not self.pad and len(batch) < world_size:
            raise ValueError(f"a batch of {len(batch)} rows cannot feed {world_size} ranks without padding; "
                             "every rank needs at least one row")
        if self.pad and len(batch) % world_size:
            padding = world_size - len(batch) % world_size
            batch = batch.reorder(list(range(len(batch))) + [len(batch) - 1] * padding)
        return [RankCall((piece, *rest), kwargs) for piece in batch.chunk(world_size)]

    def gather(self, results: list[Any], args: tuple, kwargs: dict) -> Any:
        if not isinstance(results[0], Batch):
            return results[0]
        joined = Batch.concat(results)
        rows = len(args[0])
        return joined.slice(0, rows)


def balanced_partition(weights: list[int], parts: int) -> list[list[int]]:
    """Indices of ``weights`` in ``parts`` groups of nearly equal sum (sorted greedy, "longest
    processing time first": heaviest item to the lightest group, ties to the group with fewer items),
    each group sorted; every group gets an item when there are at least ``parts``. Its largest sum is
    at most 4/3 of the best possible (Graham's bound)."""
    groups: list[list[int]] = [[] for _ in range(parts)]
    totals = [0] * parts
    for index in sorted(range(len(weights)), key=lambda item: -weights[item]):
        lightest = min(range(parts), key=lambda group: (totals[group], len(groups[group])))
        groups[lightest].append(index)
        totals[lightest] += weights[index]
    return [sorted(group) for group in groups]


def prompt_runs(batch: Batch) -> list[list[int]]:
    """Consecutive rows of ``batch`` with the same prompt (the n responses of a group), as row lists."""
    runs: list[list[int]] = []
    prompts = batch["prompts"]
    for row in range(len(batch)):
        if runs and torch.equal(prompts[row], prompts[runs[-1][0]]):
            runs[-1].append(row)
        else:
            runs.append([row])
    return runs


def group_rows(batch: Batch, group: Any, size: int, rank: int) -> tuple[Batch, int, int]:
    """``(union, start, end)``: the rows of every rank of the process group ``group`` (``size``
    ranks, this one rank ``rank`` of it), in rank order, and where this rank's ``batch`` lies in the
    union (a collective of the group: ``all_gather_object`` of the rows on the CPU). Engines whose
    ranks split a micro-batch's work (tensor or sequence parallelism) run the union and keep their own
    rows' results."""
    import torch.distributed as dist

    if size == 1:
        return batch, 0, len(batch)
    pieces: list[Batch | None] = [None] * size
    dist.all_gather_object(pieces, batch.to("cpu"), group=group)
    start = sum(len(piece) for piece in pieces[:rank])
    return Batch.concat(pieces), start, start + len(batch)


def rank_token_metrics(batch: Batch, reduce: Callable[[list[float], Any], list[float]]) -> dict[str, float]:
    """``perf/dp_rank_tokens/max`` and ``/min``: the real tokens (prompt + response) of the busiest
    and the idlest data-parallel rank in this call; ``reduce(values, op)`` reduces over the ranks
    that split the batch (see :class:`rlloom.types.MiniBatchStats`)."""
    import torch.distributed as dist

    tokens = float(row_tokens(batch).sum())
    most, negated_least = reduce([tokens, -tokens], dist.ReduceOp.MAX)
    return {"perf/dp_rank_tokens/max": most, "perf/dp_rank_tokens/min": -negated_least}


class TokenBalancedSplit:
    """Pieces of balanced real-token counts (``dp_split_tokens``; see the module docstring)."""

    def pieces(self, batch: Batch, world_size: int) -> list[list[int]]:
        """The rows of each rank."""
        if len(batch) < world_size:
            raise ValueError(f"a batch of {len(batch)} rows cannot feed {world_size} ranks without padding; "
                             "every rank needs at least one row")
        if not all(name in batch for name in ("prompts", "prompt_mask", "response_mask")):
            return [piece.tolist() for piece in torch.arange(len(batch)).chunk(world_size)]  # no tokens to count
        runs = prompt_runs(batch)
        if len(runs) < world_size:
            runs = [[row] for row in range(len(batch))]
        tokens = row_tokens(batch).tolist()
        groups = balanced_partition([sum(tokens[row] for row in run) for run in runs], world_size)
        return [[row for run in group for row in runs[run]] for group in groups]

    def scatter(self, args: tuple, kwargs: dict, world_size: int) -> list[RankCall | None]:
        batch, rest = args[0], args[1:]
        if not isinstance(batch, Batch):
            raise TypeError(f"a data-parallel split needs a Batch as first argument, got {type(batch).__name__}")
        return [RankCall((batch.reorder(rows), *rest), kwargs) for rows in self.pieces(batch, world_size)]

    def gather(self, results: list[Any], args: tuple, kwargs: dict) -> Any:
        if not isinstance(results[0], Batch):
            return results[0]
        order = [row for rows in self.pieces(args[0], len(results)) for row in rows]
        joined = Batch.concat(results)
        return joined.reorder(sorted(range(len(order)), key=order.__getitem__))


class RolloutSplit:
    """``generate(prompts, sampling)`` spread over the ranks by prompt rows (see ``dp_split_rollout``)."""

    def scatter(self, args: tuple, kwargs: dict, world_size: int) -> list[RankCall | None]:
        if len(args) != 2 or not isinstance(args[0], Batch) or not isinstance(args[1], SamplingParams):
            raise TypeError("a rollout split needs generate(prompts: Batch, sampling: SamplingParams) "
                            "with both arguments positional")
        prompts, sampling = args
        ranks = min(world_size, len(prompts)) or 1
        calls: list[RankCall | None] = []
        first = sampling.first_prompt
        for piece in prompts.chunk(ranks) if len(prompts) else [prompts]:
            calls.append(RankCall((piece, dataclasses.replace(sampling, first_prompt=first)), kwargs))
            first += len(piece)
        return calls + [None] * (world_size - len(calls))

    def gather(self, results: list[Any], args: tuple, kwargs: dict) -> Any:
        pieces = [result for result in results if result is not None]
        pad_id = pieces[0].meta.get("pad_token_id", 0)
        joined = Batch.concat_padded(pieces, {"responses": pad_id})
        counts = [piece.meta["metrics"] for piece in pieces if "metrics" in piece.meta]
        if counts:
            joined.meta = {**joined.meta, "metrics": summed(counts)}
        return joined


def uneven_split() -> DataParallelSplit:
    """Mode ``dp_split_uneven``: :class:`DataParallelSplit` without padding the rows to equal parts."""
    return DataParallelSplit(pad=False)
