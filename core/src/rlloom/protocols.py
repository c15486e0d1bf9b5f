"""The contract between the rlloom core and its plugins.

Each protocol is structural (``typing.Protocol``): a plugin implements the methods, it does not
inherit from anything. Field names and shapes refer to the conventions in :mod:`rlloom.batch`.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator
from typing import Any, Protocol, runtime_checkable

import torch

from rlloom.batch import Batch
from rlloom.types import Completion, MiniBatchStats, RewardResult, SamplingParams, SyncStats

NamedTensors = Iterable[tuple[str, torch.Tensor]]

LossFn = Callable[[Batch, dict[str, torch.Tensor], MiniBatchStats], tuple[torch.Tensor, dict[str, float]]]
"""``loss_fn(micro_batch, outputs, stats) -> (loss, metrics)``.

``outputs`` holds ``"log_probs"`` [b, R] float32 with grad (and ``"entropy"`` [b, R] when the
engine computes it, ``"values"`` [b, R] for a critic). ``loss`` is this micro-batch's *share* of the
mini-batch loss, normalised with ``stats`` (global counts), so that the engine only sums gradients
over micro-batches. ``metrics`` are floats the engine averages over micro-batches.
"""


@runtime_checkable
class RolloutEngine(Protocol):
    """Generates responses from token ids."""

    def generate(self, prompts: Batch, sampling: SamplingParams) -> Batch:
        """Sample ``sampling.n`` responses for every prompt row.

        In: ``prompts`` [B, P] int64 left-padded, ``prompt_mask`` [B, P] int64, plus any other fields.
        Out: a batch of ``B * n`` rows, interleaved (rows ``i*n … i*n+n-1`` answer prompt ``i``),
        carrying every input field repeated, plus ``responses`` [B*n, R] int64 right-padded with the
        pad id, ``response_mask`` [B*n, R] int64 (1 on generated tokens, EOS included; generation
        stops at EOS or ``max_new_tokens``) and ``rollout_log_probs`` [B*n, R] float32: the policy
        log-prob of each sampled token, log softmax(logits / T) with T = ``sampling.temperature``
        (T = 1 when greedy), top-p and top-k **not** applied; 0 where the mask is 0.
        An engine that cannot report that exact quantity for the sampling asked (vLLM when
        ``sampling.filtered``) leaves ``rollout_log_probs`` out rather than report another one;
        consumers then use the train engine's log-probs.
        R is the longest response in the batch (at most ``max_new_tokens``). The output's
        ``meta["temperature"]`` is that T, so train engines compute the same policy, and
        ``meta["pad_token_id"]`` the pad id.

        Randomness: response ``j`` of prompt ``i`` depends only on (``sampling.seed``,
        ``sampling.first_prompt + i``, ``j``) and the weights, so a call split by prompts over
        several engines samples what the whole call does (see ``SamplingParams.first_prompt``).
        When ``prompts`` has a ``prompt_index`` field [B] (:data:`rlloom.tokens.PROMPT_INDEX_FIELD`),
        row ``i``'s index is ``prompt_index[i]`` instead.
        """
        ...

    def update_weights(self, named_tensors: NamedTensors) -> None:
        """Load full (unsharded) weights given in Hugging Face parameter naming."""
        ...

    def sleep(self) -> None:
        """Free what can be freed (KV cache, weights on GPU) between rollout phases."""
        ...

    def wake_up(self) -> None:
        """Restore what :meth:`sleep` freed. Weights are re-synced by the resharder afterwards."""
        ...

    def close(self) -> None:
        """Release every resource (processes, memory)."""
        ...


@runtime_checkable
class AsyncRolloutEngine(Protocol):
    """Per-request generation: one prompt at a time, many in flight (agent loops, servers).

    An engine that only has the batch call gets this from :class:`rlloom.batching.BatchingScheduler`.
    """

    async def generate_one(self, prompt_ids: list[int], sampling: SamplingParams) -> Completion:
        """Sample ``sampling.n`` responses to one prompt (its real token ids, no padding).

        Randomness is keyed as in :meth:`RolloutEngine.generate` with ``sampling.first_prompt`` as this
        prompt's index: requests for prompts ``0 … B-1`` with the same ``sampling.seed`` give the
        tokens of one batch call on those prompts. Cancelling the awaiting task withdraws a request
        that has not started; one already generating finishes and its result is dropped.
        """
        ...


@runtime_checkable
class TrainEngine(Protocol):
    """Holds a trainable (or frozen reference) model, possibly sharded over a process group."""

    def compute_log_probs(self, batch: Batch, entropy: bool = False) -> Batch:
        """Log-probs of the response tokens under the current weights, without grad.

        In: ``prompts``, ``prompt_mask``, ``responses``, ``response_mask``; ``meta["temperature"]``
        T (default 1.0): the policy is softmax(logits / T), as in the rollout engine.
        Out: a batch of the same size with ``log_probs`` [B, R] float32 (0 where
        ``response_mask`` is 0) and, when ``entropy``, ``entropy`` [B, R] float32 (entropy of the
        full next-token distribution at each response position).
        """
        ...

    def compute_values(self, batch: Batch) -> Batch:
        """Critic values at each response position: ``values`` [B, R] float32. Critic engines only."""
        ...

    def train_step(self, batch: Batch, loss_fn: LossFn) -> dict[str, float]:
        """One optimizer step on ``batch`` (the mini-batch).

        Splits ``batch`` into micro-batches, calls ``loss_fn`` on each with the model's outputs and
        the mini-batch's global :class:`~rlloom.types.MiniBatchStats`, accumulates gradients, clips
        the gradient norm, steps the optimizer and the LR schedule. Returns the averaged ``loss_fn``
        metrics plus ``grad_norm`` and ``lr``.
        """
        ...

    def named_weights(self) -> Iterator[tuple[str, torch.Tensor]]:
        """Full (unsharded) weights in Hugging Face naming, one tensor at a time (for weight sync)."""
        ...

    def save(self, path: str) -> None:
        """Write model, optimizer and LR-schedule state under the directory ``path``."""
        ...

    def load(self, path: str) -> None:
        """Restore what :meth:`save` wrote."""
        ...

    def offload(self) -> None:
        """Move parameters and optimizer state off the accelerator (no-op on CPU)."""
        ...

    def onload(self) -> None:
        """Undo :meth:`offload`."""
        ...

    def close(self) -> None:
        """Release every resource (process groups, memory)."""
        ...


@runtime_checkable
class LendsWeights(Protocol):
    """Optional ability of a train engine: its live parameters, for a rollout engine in the same process
    to generate with directly (``resharder=shared``)."""

    def live_weights(self) -> Iterator[tuple[str, torch.Tensor]]:
        """The model's own parameter tensors (no copy: the optimizer's in-place updates show through),
        in Hugging Face naming as :meth:`TrainEngine.named_weights`. ValueError when the engine holds
        only a shard of them."""
        ...


@runtime_checkable
class BorrowsWeights(Protocol):
    """Optional ability of a rollout engine: generate with tensors another engine owns."""

    def borrow_weights(self, named_tensors: NamedTensors) -> int:
        """Make the model's parameters *be* ``named_tensors`` (same storage, nothing copied), freeing its
        own copies; return how many bytes of its own it let go. ValueError naming the tensor when a
        name, shape, dtype or device does not match."""
        ...


@runtime_checkable
class Resharder(Protocol):
    """Moves weights from a train engine's layout to a rollout engine's."""

    def sync(self, train: TrainEngine, rollout: RolloutEngine) -> SyncStats:
        """Make ``rollout`` generate with ``train``'s current weights; report what moved."""
        ...


@runtime_checkable
class DistributedResharder(Resharder, Protocol):
    """A resharder whose two sides can run in different processes (split placement).

    A launcher that places train and rollout roles in different processes forms a *sync group*:
    rank 0 is the train pool's rank 0, ranks 1..N are the rollout pool's ranks 0..N-1. Then, per sync:

    - ``connect(rank, world_size, host, port)`` (once, before the first sync, on every member at the
      same time; ``host:port`` is a free address on rank 0's node);
    - ``send(train)`` on every rank of the train pool (ranks other than pool rank 0 are not members:
      they only take part in the train engine's collective ``named_weights``), at the same time as
      ``receive(rollout)`` on every rollout rank. Both return the :class:`~rlloom.types.SyncStats`
      of what moved.

    Within one process, ``sync(train, rollout)`` still works without a group.
    """

    def connect(self, rank: int, world_size: int, host: str, port: int) -> None:
        ...

    def send(self, train: TrainEngine) -> SyncStats:
        ...

    def receive(self, rollout: RolloutEngine) -> SyncStats:
        ...


@runtime_checkable
class RewardFn(Protocol):
    """Scores responses."""

    def __call__(self, batch: Batch) -> RewardResult:
        """In: ``response_text``, ``ground_truth``, ``data_source``, ``prompt_text`` (objects) and the
        token fields; out: a :class:`~rlloom.types.RewardResult` with one score per row. A verifier
        that raises on a sample must count it in ``num_errors`` and score it, not propagate."""
        ...


@runtime_checkable
class Algorithm(Protocol):
    """An RL method: which models it needs and what one training step does.

    ``step`` is a short program against the controller (``rlloom.controller.step.StepContext``):
    generate, score, compute log-probs, advantages, update, sync. It returns the step's metrics.

    Optional: an algorithm with state that must survive a resume (e.g. an adaptive KL coefficient)
    also defines ``state_dict() -> dict`` and ``load_state_dict(state)``; checkpoints keep it.
    An algorithm that constrains a cost sets the class attribute ``needs_cost = True``: the run then
    builds the ``cost`` group's function (role ``cost``, scored by ``ctx.cost``) and, with
    ``needs_critic``, a second critic for it (role ``cost_critic``, ``ctx.cost_values``).
    """

    needs_reference: bool
    needs_critic: bool

    def step(self, ctx: Any, prompts: Batch) -> dict[str, float]:
        ...


@runtime_checkable
class StatefulAlgorithm(Protocol):
    """The optional part of :class:`Algorithm` for state that must survive a resume."""

    def state_dict(self) -> dict[str, Any]:
        ...

    def load_state_dict(self, state: dict[str, Any]) -> None:
        ...


@runtime_checkable
class Tracker(Protocol):
    """Receives metrics; a failing tracker is disabled with a warning, never kills a run.

    Optional: ``rewind(step)`` drops what was logged for steps after ``step``; the trainer calls it
    when a run resumes from the checkpoint of ``step``, so the record equals an uninterrupted run's.
    It may return a few words on what it dropped (e.g. ``"2 rows (steps 3-4) of metrics.jsonl"``),
    which the trainer prints with the resume; ``None`` when there is nothing to say.
    """

    def log(self, metrics: dict[str, float], step: int) -> None:
        ...

    def close(self) -> None:
        ...
