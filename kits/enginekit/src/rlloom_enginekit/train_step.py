"""One optimizer step of a train engine on a mini-batch: the skeleton every
:meth:`rlloom.protocols.TrainEngine.train_step` shares (:func:`train_step`), driving the parts an
engine supplies (:class:`TrainParts`: its rows, micro-batches, forward, backward, reduction over
data-parallel ranks, LR and optimizer step).

The step. ``stats`` (:func:`stats_over_ranks`) count the rows this rank trains
from (:meth:`TrainParts.train_rows`) over the data-parallel (DP) ranks; rows the loss names inert
(:func:`rlloom_enginekit.packing.rows_to_train`: zero gradient, e.g. all-zero advantages) count in
``stats`` but are not run. For each micro-batch of the others ``loss, metrics = loss_fn(micro,
outputs, stats)`` (``outputs``: ``log_probs`` [b, R] and, when the engine trains entropy,
``entropy`` [b, R]; a critic's ``values`` [b, R]; all with grad), then the engine's backward of
``loss``. The loss is the micro-batch's share of the mini-batch loss, so the step's gradient is the
*sum* over micro-batches and DP ranks. An engine that must keep its ranks' collectives in step adds
padding passes (forward and a backward of zero). Then the optimizer step at the LR of step
``engine.step + 1``; a non-finite gradient norm skips the update (weights and optimizer state
unchanged) but the step still counts for the LR schedule.

Metric contract of ``train_step`` (every engine returns these names):

- each ``loss_fn`` metric (a float or a 0-d tensor, summed on its device and read once per step):
  averaged over this rank's micro-batches, then over the DP ranks (every rank must report the same
  names);
- ``grad_norm``: the global L2 norm of the step's gradient, before clipping;
- ``lr``: the learning rate of this step (also when the update was skipped);
- ``skipped_update``: 1.0 when a non-finite ``grad_norm`` skipped the update, else 0.0;
- ``skipped_rows``: the fraction of the mini-batch's rows left out as inert;
- ``perf/dp_rank_tokens/max|min``: :func:`rlloom.controller.dispatch.rank_token_metrics`;
- on CUDA ``perf/max_memory_allocated_gb`` and ``perf/max_memory_reserved_gb``
  (:func:`rlloom_enginekit.devices.cuda_memory_metrics`);
- the engine's own: sums over the DP ranks (:meth:`TrainParts.extra_sums`) and what it adds after
  the step (:meth:`TrainParts.extra_metrics`).
"""

from __future__ import annotations

import math
import time
from typing import Any, Protocol

import torch
import torch.distributed as dist

from rlloom import Batch, MiniBatchStats
from rlloom.protocols import LossFn
from rlloom_enginekit.devices import cuda_memory_metrics
from rlloom_enginekit.dispatch import rank_token_metrics
from rlloom_enginekit.metrics import add_metrics, read_metric_sums
from rlloom_enginekit.packing import rows_to_train
from rlloom_enginekit.sequences import policy_temperature


class TrainParts(Protocol):
    """What a train engine supplies to :func:`train_step`. A micro-batch is a pair ``(micro,
    inputs)``: ``micro`` the rows on the engine's device (what ``loss_fn`` gets), ``inputs`` what
    :meth:`train_outputs` takes (the engine's own form of them)."""

    device: torch.device
    dp_size: int  # the data-parallel ranks that split the mini-batch
    step: int  # optimizer steps taken (skipped updates included); train_step adds one

    def prepare_train(self, batch: Batch) -> None:
        """Raise unless this engine trains and ``batch`` suits it (``TRAIN_INPUT_FIELDS`` at least);
        bring offloaded state back; train mode; gradients zero."""

    def train_rows(self, batch: Batch) -> Batch:
        """The rows this rank trains on (its own, or its tensor-parallel group's)."""

    def train_micro_batches(self, rows: Batch) -> tuple[list[tuple[Batch, Any]], list[Any]]:
        """``rows`` cut into micro-batches, and the ``inputs`` of the padding passes this rank adds."""

    def train_outputs(self, inputs: Any, temperature: float) -> dict[str, torch.Tensor]:
        """The outputs ``loss_fn`` gets (with grad), policy temperature ``temperature``."""

    def backward(self, loss: torch.Tensor) -> None:
        """Accumulate the gradient of one micro-batch's ``loss`` (its share of the mini-batch's)."""

    def reduce_over_dp(self, values: list[float], op: dist.ReduceOp = dist.ReduceOp.SUM) -> list[float]:
        """``values`` reduced with ``op`` over the DP ranks (a collective)."""

    def lr_at(self, step: int) -> float:
        """The learning rate of optimizer step ``step`` (1-based)."""

    def optimizer_step(self, lr: float) -> float:
        """Clip and step at ``lr``, or skip the update when the norm is not finite; zero the gradients
        for the next step if needed. Returns the gradient norm before clipping."""

    def extra_sums(self, micros: list[tuple[Batch, Any]]) -> dict[str, float]:
        """The engine's own metrics that are sums over the DP ranks, from this rank's micro-batches."""

    def extra_metrics(self, result: dict[str, float], started: float) -> dict[str, float]:
        """The engine's own metrics after the step (``result`` so far; ``started``: the
        ``time.perf_counter()`` at the step's start)."""


def stats_over_ranks(response_mask: torch.Tensor, reduce: Any) -> MiniBatchStats:
    """The :class:`~rlloom.types.MiniBatchStats` of the mini-batch whose rows ``response_mask`` [b, R] are
    this rank's share: ``reduce(values, op)`` (:meth:`TrainParts.reduce_over_dp`) reduces a list of floats
    over the ranks that split it (``op`` a ``torch.distributed.ReduceOp``): sums of the counts, the longest R."""
    lengths = response_mask.sum(dim=1)
    tokens, seqs, nonempty = reduce(
        [float(lengths.sum()), float(len(response_mask)), float((lengths > 0).sum())], dist.ReduceOp.SUM)
    (longest,) = reduce([float(response_mask.shape[1])], dist.ReduceOp.MAX)
    return MiniBatchStats(int(tokens), int(seqs), int(nonempty), int(longest))


def train_step(engine: TrainParts, batch: Batch, loss_fn: LossFn) -> dict[str, float]:
    """One optimizer step of ``engine`` on this rank's rows ``batch`` of the mini-batch (see the
    module docstring for the step and the metrics it returns)."""
    engine.prepare_train(batch)
    started = time.perf_counter()
    temperature = policy_temperature(batch)
    rows = engine.train_rows(batch)
    stats = stats_over_ranks(rows["response_mask"], engine.reduce_over_dp)
    trained, skipped = rows_to_train(rows, loss_fn)
    micros, padding = engine.train_micro_batches(trained)
    result = _run_micro_batches(engine, loss_fn, stats, temperature, micros, padding)
    extra = engine.extra_sums(micros)
    skipped_rows, total, *sums = engine.reduce_over_dp([float(skipped), float(len(rows)), *extra.values()])
    result["skipped_rows"] = skipped_rows / max(total, 1.0)
    result.update(zip(extra, sums))
    lr = engine.lr_at(engine.step + 1)
    grad_norm = engine.optimizer_step(lr)
    engine.step += 1
    result.update(grad_norm=grad_norm, lr=lr, skipped_update=float(not math.isfinite(grad_norm)))
    result.update(rank_token_metrics(rows, engine.reduce_over_dp))
    if engine.device.type == "cuda":
        result.update(cuda_memory_metrics(engine.device))
    result.update(engine.extra_metrics(result, started))
    return result


def _run_micro_batches(engine: TrainParts, loss_fn: LossFn, stats: MiniBatchStats, temperature: float,
                       micros: list[tuple[Batch, Any]], padding: list[Any]) -> dict[str, float]:
    """Forward, loss and backward of each micro-batch, then the padding passes (a backward of zero
    times their outputs, so that every parameter takes part); the ``loss_fn`` metrics averaged over
    the micro-batches, then over the DP ranks."""
    sums: dict[str, float | torch.Tensor] = {}
    for micro, inputs in micros:
        loss, metrics = loss_fn(micro, engine.train_outputs(inputs, temperature), stats)
        engine.backward(loss)
        add_metrics(sums, metrics)
    for inputs in padding:
        outputs = engine.train_outputs(inputs, temperature)
        (sum(output.sum() for output in outputs.values()) * 0.0).backward()
    names = sorted(sums)
    averaged = engine.reduce_over_dp([total / len(micros) for total in read_metric_sums(sums, names)])
    return {name: value / engine.dp_size for name, value in zip(names, averaged)}
