"""``StepContext``: the controller API an algorithm's ``step`` (generate → score → log-probs → advantages →
update → sync) is written against. Each stage runs on its role's worker group and records its wall time
(``timing_s/<stage>``) and standard metrics (verl's names) in ``ctx.metrics``; independent stages run at the
same time in a :meth:`StepContext.concurrently` block. A stage takes its role as an argument
(``ctx.score(batch, role="cost", into="costs")``), so a declared :class:`~rlloom.types.Role` needs no stage."""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import hashlib
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

import torch

from rlloom.batch import Batch, masked_mean, row_tokens
from rlloom.controller.futures import overlap_s, submit
from rlloom.protocols import Future, LossFn, ReportsMetrics, Resharder, RewardFn, RolloutEngine, TrainEngine
from rlloom.types import RewardResult, Role, SamplingParams

REWARD_ROLE = "reward"


@dataclass
class Roles:
    """A run's worker groups (or in-process engines) by role (``ref``, ``critic``: None when unused); ``declared``:
    each declared :class:`~rlloom.types.Role` -> its engine or function; ``agent_rollout``: a multi-turn agent
    runner's call in place of ``rollout.generate`` (same contract, plus ``response_attention_mask``, ``agent_*``)."""

    rollout: RolloutEngine
    actor: TrainEngine
    reward_fn: RewardFn
    resharder: Resharder
    ref: TrainEngine | None = None
    critic: TrainEngine | None = None
    declared: dict[Role, Any] = field(default_factory=dict)
    agent_rollout: Callable[[Batch, SamplingParams], Batch] | None = None
    weight_version: int = 0  # the rollout engine's weights: the actor's after this step (0: the starting weights)
    sleep_rollout: bool = False
    rollout_asleep: bool = False
    offload_train_engines: bool = False

    def get(self, name: str) -> Any:
        """The role ``name``'s engine or function; RuntimeError when this run has none."""
        standard = {"actor": self.actor, "ref": self.ref, "critic": self.critic, "rollout": self.rollout,
                    REWARD_ROLE: self.reward_fn}
        found = standard[name] if name in standard else next(
            (held for role, held in self.declared.items() if role.name == name), None)
        if found is None:
            raise RuntimeError(f"this run has no {name}: the algorithm did not ask for one")
        return found

    def offload_train_engines_if_asked(self) -> None:
        """Before generating, with ``offload_train_engines``: :meth:`TrainEngine.offload` every train engine
        (each brings its state back at its next call)."""
        if self.offload_train_engines:
            declared = [held for role, held in self.declared.items() if role.kind == "train_engine"]
            for engine in (self.actor, self.ref, self.critic, *declared):
                if engine is not None:
                    engine.offload()

    def trained(self) -> dict[str, TrainEngine]:
        """The engines a checkpoint saves, by role name: ``actor``, the critic and the declared trained roles."""
        engines = {"actor": self.actor, "critic": self.critic,
                   **{role.name: held for role, held in self.declared.items() if role.trained}}
        return {role: engine for role, engine in engines.items() if engine is not None}

    def wake_rollout(self) -> None:
        """Before generating or loading weights: undo :meth:`sleep_rollout_if_asked`."""
        if self.rollout_asleep:
            self.rollout.wake_up()
            self.rollout_asleep = False

    def sleep_rollout_if_asked(self) -> None:
        """Before the train engines' passes (log-probs, values, updates), with ``sleep_rollout``: frees the KV cache."""
        if self.sleep_rollout and not self.rollout_asleep:
            self.rollout.sleep()
            self.rollout_asleep = True


def _store(batch: Batch, name: str, key: str) -> Callable[[Batch], None]:
    """A stage's ``finish`` callback: ``batch[name] = out[key]``."""
    return lambda out: batch.__setitem__(name, out[key])


def token_level(result: RewardResult, response_mask: torch.Tensor) -> torch.Tensor:
    """The result's token-level values [B, R] (float32), or each row's score on the response's last
    token (an empty response has no token and gets nothing)."""
    if result.token_level is not None:
        return result.token_level.float()
    values = torch.zeros(response_mask.shape, dtype=torch.float32)
    lengths = response_mask.sum(dim=1)
    rows = torch.nonzero(lengths > 0).squeeze(1)
    values[rows, lengths[rows] - 1] = result.scores.float()[rows]
    return values


def derive_seed(seed: int, step: int, stage: str, call: int) -> int:
    """A 63-bit sampling seed determined by (run seed, step, stage name, call index within the step)."""
    digest = hashlib.sha256(f"{seed}/{step}/{stage}/{call}".encode()).digest()
    return int.from_bytes(digest[:8], "little") >> 1


@dataclass
class StepContext:
    """Everything one training step may call; ``metrics`` collects what the stages report. With ``seed``,
    a :meth:`generate` call without its own ``sampling.seed`` samples with ``derive_seed(seed, step, stage,
    k)`` (the ``k``-th call of that stage here), so a resumed run repeats the step's rollouts.
    ``last_batch``: the batch of the last :meth:`update_actor` (for rollout dumps)."""

    roles: Roles
    tokenizer: Any
    sampling: SamplingParams
    step: int
    next_prompts: Callable[[], Batch] | None = None
    metrics: dict[str, float] = field(default_factory=dict)
    seed: int | None = None
    last_batch: Batch | None = None
    _calls: dict[str, int] = field(default_factory=dict, repr=False)
    _pending: list[tuple[str, Future, Callable[[Any], None]]] | None = field(default=None, repr=False)
    _deferring: bool = field(default=False, repr=False)

    def more_prompts(self) -> Batch:
        """Another batch of ``trainer.train_batch_size`` training prompts (e.g. for DAPO's dynamic
        sampling, which refills a batch after dropping groups)."""
        if self.next_prompts is None:
            raise RuntimeError("this context has no prompt source (validation contexts draw no training data)")
        return self.next_prompts()

    @contextlib.contextmanager
    def timed(self, stage: str) -> Iterator[None]:
        """Add the block's wall time to ``timing_s/<stage>``."""
        start = time.perf_counter()
        try:
            yield
        finally:
            self._add_time(stage, time.perf_counter() - start)

    def _add_time(self, stage: str, seconds: float) -> None:
        key = f"timing_s/{stage}"
        self.metrics[key] = self.metrics.get(key, 0.0) + seconds

    @contextlib.contextmanager
    def concurrently(self) -> Iterator[Concurrent]:
        """``with ctx.concurrently() as run:``, then ``run.score(batch)``, ``run.old_log_probs(batch)``, …
        (:class:`Concurrent`): each submits its call and returns None; the fields and metrics the stages
        add appear when the block ends (the calls waited for in the order submitted). Calls on different
        worker groups run in parallel; in one process, one after another with the same results.
        ``timing_s/<stage>``: each call's own running time; ``timing_s/concurrent``: the block's wall
        time; ``perf/concurrent_overlap_s``: :func:`~rlloom.controller.futures.overlap_s` of the calls."""
        if self._pending is not None:
            raise RuntimeError("StepContext.concurrently() blocks do not nest")
        self._pending = []
        run = Concurrent(self)
        start = time.perf_counter()
        try:
            yield run
            pending = self._pending
        finally:
            self._pending = None
            run.ended = True
        spans = []
        for stage, future, finish in pending:
            finish(future.result())
            span = future.span()
            self._add_time(stage, span[1] - span[0])
            spans.append(span)
        self._add_time("concurrent", time.perf_counter() - start)
        overlap = self.metrics.get("perf/concurrent_overlap_s", 0.0)
        self.metrics["perf/concurrent_overlap_s"] = overlap + overlap_s(spans)

    def _submit(self, stage: Callable[[Batch], Batch], batch: Batch) -> None:
        """Run the stage method ``stage`` with its call deferred to the end of the open block."""
        self._deferring = True
        try:
            stage(batch)
        finally:
            self._deferring = False

    def _run(self, stage: str, handle: Any, method: str, args: tuple, kwargs: dict,
             finish: Callable[[Any], None]) -> None:
        """Call ``handle.method(*args, **kwargs)`` and pass its result to ``finish``: now, timed as
        ``stage``, or, started from a :class:`Concurrent`, at the end of its block."""
        if self._deferring:
            self._pending.append((stage, submit(handle, method, *args, **kwargs), finish))
            return
        with self.timed(stage):
            value = submit(handle, method, *args, **kwargs).result()
        finish(value)

    # -------------------------------------------------------------------------- stages
    def generate(self, prompts: Batch, n: int, sampling: SamplingParams | None = None, stage: str = "gen") -> Batch:
        """``n`` responses per prompt row (interleaved), their sampled tokens decoded into
        ``response_text``, each stamped with the rollout's ``weight_version``; the output's
        ``meta["metrics"]`` (an agent runner's) join the step's."""
        params = dataclasses.replace(sampling or self.sampling, n=n)
        if self.seed is not None and params.seed is None:
            call = self._calls[stage] = self._calls.get(stage, -1) + 1
            params = dataclasses.replace(params, seed=derive_seed(self.seed, self.step, stage, call))
        self.roles.offload_train_engines_if_asked()
        self.roles.wake_rollout()
        with self.timed(stage):
            batch = (self.roles.agent_rollout or self.roles.rollout.generate)(prompts, params)
        self.metrics.update(batch.meta.pop("metrics", {}))
        batch["weight_version"] = torch.full((len(batch),), self.roles.weight_version, dtype=torch.long)
        batch.meta.setdefault("max_new_tokens", params.max_new_tokens)
        self.metrics["perf/total_tokens"] = float(row_tokens(batch).sum())
        sampled = [row[mask.bool()].tolist() for row, mask in zip(batch["responses"], batch["response_mask"])]
        batch["response_text"] = self.tokenizer.batch_decode(sampled, skip_special_tokens=True)
        return batch

    def score(self, batch: Batch, role: str = REWARD_ROLE, into: str = "scores") -> Batch:
        """Run the role's reward function (the reward's, or a declared reward role's: Safe-RLHF's ``cost``
        with ``into="costs"``): adds ``<into>`` [B], ``token_level_<into>`` [B, R] (:func:`token_level`)
        and ``<role>_<name>`` [B] per reported component. Metrics: ``critic/score/mean|max|min`` (another
        role: ``<role>/score/…``), ``<role>/errors|timeouts``, ``<role>/<name>/mean``; for the reward,
        ``response_length/*`` too."""
        self._run(role, self.roles.get(role), "__call__", (batch,), {},
                  functools.partial(self._add_scores, batch, role, into))
        return batch

    def _add_scores(self, batch: Batch, role: str, into: str, result: RewardResult) -> None:
        scores = result.scores.float()
        mask = batch["response_mask"]
        batch[into] = scores
        batch[f"token_level_{into}"] = token_level(result, mask)
        for name, values in result.components.items():
            batch[f"{role}_{name}"] = values.float()
        section = "critic" if role == REWARD_ROLE else role
        self.metrics.update({f"{section}/score/mean": float(scores.mean()), f"{section}/score/max": float(scores.max()),
                             f"{section}/score/min": float(scores.min()), f"{role}/errors": float(result.num_errors),
                             f"{role}/timeouts": float(result.num_timeouts)})
        for name, values in result.components.items():
            self.metrics[f"{role}/{name}/mean"] = float(values.float().mean())
        if role == REWARD_ROLE:
            self._add_lengths(batch)

    def _add_lengths(self, batch: Batch) -> None:
        lengths = batch["response_mask"].sum(dim=1).float()
        self.metrics.update({"response_length/mean": float(lengths.mean()), "response_length/max": float(lengths.max()),
                             "response_length/min": float(lengths.min()), "response_length/clip_ratio":
                             float((lengths >= batch.meta.get("max_new_tokens", 1e9)).float().mean())})

    def old_log_probs(self, batch: Batch) -> Batch:
        """Behaviour log-probs from the actor (``old_log_probs``) and the rollout/trainer gap
        ``training/rollout_probs_diff_mean|max``: mean|max over response tokens of
        |exp(rollout_log_probs) − exp(old_log_probs)|."""
        self.roles.sleep_rollout_if_asked()
        self._run("old_log_prob", self.roles.actor, "compute_log_probs", (batch,), {"entropy": True},
                  functools.partial(self._add_old_log_probs, batch))
        return batch

    def _add_old_log_probs(self, batch: Batch, out: Batch) -> None:
        batch["old_log_probs"] = out["log_probs"]
        mask = batch["response_mask"].float()
        self.metrics["actor/entropy"] = float(masked_mean(out["entropy"], mask))
        if "rollout_log_probs" in batch:
            gap = (batch["rollout_log_probs"].exp() - out["log_probs"].exp()).abs()
            self.metrics["training/rollout_probs_diff_mean"] = float(masked_mean(gap, mask))
            self.metrics["training/rollout_probs_diff_max"] = float((gap * mask).max()) if mask.any() else 0.0

    def ref_log_probs(self, batch: Batch) -> Batch:
        """Reference-policy log-probs (``ref_log_probs``)."""
        self.roles.sleep_rollout_if_asked()
        self._run("ref", self.roles.get("ref"), "compute_log_probs", (batch,), {},
                  _store(batch, "ref_log_probs", "log_probs"))
        return batch

    def values(self, batch: Batch, role: str = "critic", into: str = "values") -> Batch:
        """The role's current values (``<into>`` [B, R]): the critic's by default, or a declared critic's
        (Safe-RLHF: ``role="cost_critic", into="cost_values"``); timed as ``timing_s/<into>``."""
        self.roles.sleep_rollout_if_asked()
        self._run(into, self.roles.get(role), "compute_values", (batch,), {}, _store(batch, into, "values"))
        return batch

    def update_actor(self, batch: Batch, loss_fn: LossFn, mini_batch_rows: int, epochs: int = 1) -> None:
        """:meth:`update` of the actor; ``batch`` becomes ``last_batch``."""
        self.update("actor", batch, loss_fn, mini_batch_rows, epochs)
        self.last_batch = batch

    def update_critic(self, batch: Batch, loss_fn: LossFn, mini_batch_rows: int, epochs: int = 1) -> None:
        """:meth:`update` of the critic (the loss reads ``outputs["values"]`` [b, R])."""
        self.update("critic", batch, loss_fn, mini_batch_rows, epochs)

    def update(self, role: str, batch: Batch, loss_fn: LossFn, mini_batch_rows: int, epochs: int = 1) -> None:
        """``epochs`` passes over ``batch`` in mini-batches of ``mini_batch_rows`` rows, one optimizer step
        each, on the trained ``role`` (``"actor"``, a declared ``"cost_critic"``), timed as ``update_<role>``;
        metrics averaged over the steps as ``<role>/<name>`` (a name with a section is kept as it is)."""
        engine = self.roles.get(role)
        self.roles.sleep_rollout_if_asked()
        collected: dict[str, list[float]] = {}
        with self.timed(f"update_{role}"):
            for _ in range(epochs):
                for mini_batch in batch.split(mini_batch_rows):
                    for name, value in engine.train_step(mini_batch, loss_fn).items():
                        collected.setdefault(name, []).append(float(value))
        for name, values in collected.items():
            self.metrics[name if "/" in name else f"{role}/{name}"] = sum(values) / len(values)

    def sync_weights(self) -> None:
        """Push the actor's weights into the rollout engine, whose ``weight_version`` becomes this step
        (``perf/weight_sync_*``: the :class:`~rlloom.types.SyncStats`), then add the rollout engine's own
        metrics when it reports any."""
        self.roles.wake_rollout()
        with self.timed("update_weights"):
            stats = self.roles.resharder.sync(self.roles.actor, self.roles.rollout)
        self.roles.weight_version = self.step
        self.metrics["perf/weight_sync_bytes"] = float(stats.num_bytes)
        self.metrics["perf/weight_sync_seconds"] = stats.seconds
        self.metrics["perf/weight_sync_max_tensor_mb"] = stats.max_tensor_bytes / 1e6
        if stats.peak_extra_bytes is not None:
            self.metrics["perf/weight_sync_peak_extra_gb"] = stats.peak_extra_bytes / 1e9
        if stats.seconds > 0:
            self.metrics["perf/weight_sync_gb_per_s"] = stats.num_bytes / stats.seconds / 1e9
        if isinstance(self.roles.rollout, ReportsMetrics):
            self.metrics.update(self.roles.rollout.metrics())


class Concurrent:
    """The stages of a :meth:`StepContext.concurrently` block: each submits the :class:`StepContext` stage of
    its name and returns None, so nothing in the block reads what a stage adds before the block ends."""

    def __init__(self, ctx: StepContext) -> None:
        self._ctx = ctx
        self.ended = False

    def _start(self, stage: Callable[..., Batch], batch: Batch, **kwargs: Any) -> None:
        if self.ended:
            raise RuntimeError("this concurrently() block has ended; call the stage on the StepContext")
        self._ctx._submit(functools.partial(stage, **kwargs), batch)

    def score(self, batch: Batch, **kwargs: Any) -> None:
        """:meth:`StepContext.score`."""
        self._start(self._ctx.score, batch, **kwargs)

    def old_log_probs(self, batch: Batch) -> None:
        """:meth:`StepContext.old_log_probs`."""
        self._start(self._ctx.old_log_probs, batch)

    def ref_log_probs(self, batch: Batch) -> None:
        """:meth:`StepContext.ref_log_probs`."""
        self._start(self._ctx.ref_log_probs, batch)

    def values(self, batch: Batch, **kwargs: Any) -> None:
        """:meth:`StepContext.values`."""
        self._start(self._ctx.values, batch, **kwargs)
