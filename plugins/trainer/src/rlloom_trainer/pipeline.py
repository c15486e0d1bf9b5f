"""Asynchronous rollouts, ``trainer.async_mode`` (docs/async.md): generation runs ahead of training.

A *job* is the generation of one step's prompt batch, submitted to the rollout role (which lives outside
the trainer's process: :class:`~rlloom_trainer.rollout_process.RolloutProcess` under ``launcher=local``, its
own pool under ``launcher=ray``) without waiting. The role runs its calls in the order submitted, so a job
generates with the weights of the last sync submitted before it: its ``version``, stamped on every sample.

- ``one_step_off``: when step ``k`` takes its batch, the job of step ``k + 1`` is submitted, so batch ``k + 1``
  is generated (by the weights before step ``k``'s update) while step ``k`` trains; the sync after the update
  reaches the rollout role once that generation ends.
- ``fully_async`` with ``trainer.max_staleness`` K: jobs are admitted AReaL's way, at most
  ``(K + version + 1) × batch`` samples ever, ``version`` the trainer's (the number of syncs so far): the job
  of step ``i`` is submitted as soon as ``i <= K + version + 1`` — when a step takes its batch and after each
  sync — so finished batches wait in a buffer while the trainer is busy. A step ``i`` trains at version
  ``i - 1`` on samples of version ``>= i - 1 - K``: the staleness bound holds by construction, and no sample is
  ever dropped. K = 0 generates each batch after the previous update: the trajectories of ``sync``.
- ``trainer.partial_rollout`` (``fully_async`` under ``launcher=local`` or ``ray``): the rollout process (each
  worker of the rollout pool) runs each weight update as it arrives, interrupting the job in flight (its piece of
  it), which resumes under the new weights (each process's :class:`rlloom_enginekit.partial.LoadGate`); the
  pipeline labels each sync's weights with its step, and a job's samples carry the oldest (``weight_version``)
  and newest (``weight_version_max``) versions that sampled their tokens, as the process recorded them.
- ``trainer.stream_groups`` (``fully_async`` under ``launcher=local`` or ``ray``): the unit is the group (one
  prompt's ``n`` responses). Prompts are submitted while the groups admitted and neither taken nor dropped stay
  within ``(K + version + 1) × batch − groups taken``; the rollout role streams each group back as it finishes
  (:func:`rlloom_enginekit.stream.generate_groups`, the calls of :mod:`rlloom_enginekit.stream_calls`) into a
  :class:`~rlloom_trainer.streaming.GroupBuffer`; a step (after the first, which learns the call) takes the
  first ``batch`` fresh groups to arrive, ordered by (draw, row), stale ones dropped or regenerated
  (``trainer.stale_policy``); a checkpoint records the data position before the first drawn batch with a
  prompt not done, and the prompts done after it.

The algorithm's step is unchanged: :class:`PipelinedContext` hands its ``ctx.generate(prompts, n)`` the job's
batch. The first step's call teaches the pipeline the call (``n``, sampling, stage) that later jobs repeat;
a step that generates again or draws more prompts (DAPO's dynamic sampling, ReMax's greedy baseline) is a
ConfigError. Prompts are drawn when a job is submitted; a checkpoint records the data position of the
last *trained* batch, so a resumed run regenerates the untrained jobs from the same prompts and seeds
(by the checkpoint's weights): nothing is lost or trained twice.
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import torch
from rlloom.batch import PROMPT_INDEX_FIELD, Batch
from rlloom.config import ConfigError, ResolvedConfig
from rlloom.controller.futures import submit
from rlloom.controller.step import StepContext, derive_seed
from rlloom.protocols import Future, RemoteHandle
from rlloom.types import SamplingParams
from rlloom_enginekit.partial import VERSION_FIELD, VERSION_MAX_FIELD, summed
from rlloom_enginekit.stream_calls import GENERATE_STREAM, PARTIAL_ROLLOUTS, STREAM_GROUPS

from rlloom_trainer.streaming import Group, GroupBuffer, place

GENERATED_FIELDS = ("responses", "response_mask", "rollout_log_probs", VERSION_FIELD, VERSION_MAX_FIELD)
SYNC = "sync"
ONE_STEP_OFF = "one_step_off"
FULLY_ASYNC = "fully_async"
STREAM_LAUNCHERS = ("local", "ray")  # the launchers that run partial rollouts and streamed groups (their own process)
REFUSED_RESHARDERS = ("shared",)  # the rollout generates with the train engine's own tensors


def check_async(resolved: ResolvedConfig) -> None:
    """ConfigError, naming the keys, when ``trainer.async_mode`` cannot run with the rest of the config:
    a multi-turn agent (its loop drives an in-process engine), ``resharder=shared`` (one copy of the
    weights cannot be trained and generated with at once), ``trainer.offload_train_engines`` (the train
    engines would leave the device while they train), ``launcher=ray`` with the rollout in the actor's pool
    (:func:`check_partial_on_ray` too), ``trainer.partial_rollout`` or ``trainer.stream_groups`` outside
    ``fully_async`` under ``launcher=local`` or ``ray``."""
    mode, sections, choices = resolved.sections["trainer"].async_mode, resolved.sections, resolved.choices
    for key in ("partial_rollout", "stream_groups"):
        if getattr(sections["trainer"], key) and (mode != FULLY_ASYNC or choices["launcher"] not in STREAM_LAUNCHERS):
            raise ConfigError(f"trainer.{key}=true needs trainer.async_mode=fully_async and launcher="
                              f"{' or '.join(STREAM_LAUNCHERS)} (not trainer.async_mode={mode}, "
                              f"launcher={choices['launcher']}); set it false")
    if mode == SYNC:
        return
    prefix = f"trainer.async_mode={mode}"
    from rlloom_agentkit.config import SingleTurnConfig

    if not isinstance(sections["agent"], SingleTurnConfig):
        raise ConfigError(f"{prefix} runs single-turn rollouts only; agent={choices['agent']} needs "
                          "trainer.async_mode=sync (valid choices: sync, one_step_off, fully_async)")
    if choices["resharder"] in REFUSED_RESHARDERS:
        raise ConfigError(f"{prefix}: resharder={choices['resharder']} generates with the train engine's own "
                          "weights while they train; use resharder=in_process (or safetensors, broadcast)")
    if sections["trainer"].offload_train_engines:
        raise ConfigError(f"{prefix}: trainer.offload_train_engines=true offloads the train engines for "
                          "generation, which now runs while they train; set it false")
    if choices["launcher"] == "ray":
        launcher = sections["launcher"]
        if launcher.pool_of("rollout") == launcher.pool_of("actor"):
            raise ConfigError(f"{prefix} with launcher=ray needs the rollout in a pool of its own: "
                              f"launcher.mapping.rollout={launcher.pool_of('rollout')} is the actor's pool "
                              "(add launcher.resource_pools.rollout=1 launcher.mapping.rollout=rollout)")
        check_partial_on_ray(resolved)


def check_partial_on_ray(resolved: ResolvedConfig) -> None:
    """``trainer.partial_rollout`` under ``launcher=ray``: each rollout worker takes each load in a Ray concurrency
    group of its own, through the object store (``resharder=in_process``); ConfigError otherwise."""
    resharder = resolved.choices["resharder"]
    if resolved.sections["trainer"].partial_rollout and resharder != "in_process":
        raise ConfigError(f"trainer.partial_rollout=true with launcher=ray loads the weights through the object store: "
                          f"resharder={resharder} is not resharder=in_process")


@dataclass
class Job:
    """One step's generation: its prompts, sampling, the weights' ``version`` it runs with, its future,
    and the data ``position`` (the data iterator's state and the draw count) after its prompts were drawn."""

    step: int
    prompts: Batch
    position: tuple[dict, int]
    params: SamplingParams | None = None
    version: int = 0
    future: Future | None = None
    oldest: torch.Tensor | None = None  # partial rollouts: each sample's oldest version, as the rollout recorded it
    batch: Batch | None = None  # streamed: the step's groups, assembled
    waited_s: float = 0.0  # streamed: the wait for them, before the step began


@dataclass
class RolloutPipeline:
    """The jobs of a run in ``mode`` (``one_step_off`` or ``fully_async``); ``draw()`` draws the next training
    prompt batch, ``position()`` the data position after it. See the module docstring."""

    mode: str
    rollout: Any
    draw: Callable[[], Batch]
    position: Callable[[], tuple[dict, int]]
    sampling: SamplingParams
    seed: int
    total_steps: int
    max_staleness: int
    version: int = 0
    partial: bool = False
    trained_position: tuple[dict, int] | None = None
    jobs: dict[int, Job] = field(default_factory=dict)
    call: tuple[int, SamplingParams | None, str] | None = None
    waited_s: float = 0.0
    started: float | None = None  # when the first step took its batch
    generated_s: float = 0.0
    generator_span: tuple[float, float] | None = None
    buffer: GroupBuffer | None = None  # trainer.stream_groups: the finished groups (rlloom_trainer.streaming)
    positions: dict[int, tuple[dict, int]] = field(default_factory=dict)  # streamed: the position after each draw
    versions: dict[str, int] = field(default_factory=dict)  # streamed: each live group's weights
    taken_groups: int = 0
    unsubmitted: list[Batch] = field(default_factory=list)  # streamed: prompts drawn, not yet submitted

    def __post_init__(self) -> None:
        if not isinstance(self.rollout, RemoteHandle):
            raise ConfigError(f"trainer.async_mode={self.mode} needs the rollout role outside the trainer's "
                              "process; this launcher builds it in-process (use launcher=local or launcher=ray)")
        self.trained_position = self.position()
        checks = [(PARTIAL_ROLLOUTS, self.version)] * self.partial + [(STREAM_GROUPS, 0)] * (self.buffer is not None)
        for request, value in checks:
            try:
                submit(self.rollout, request, value).result()
            except TypeError as error:
                raise ConfigError(str(error)) from None
        if self.buffer is not None:
            self.positions[self.trained_position[1]] = self.trained_position
            self.buffer.first = self.trained_position[1] + 1
            self.taken_groups = self.version * self.buffer.batch_size

    def prompts(self, step: int) -> Batch:
        """Step ``step``'s prompts: its job's (drawn when the job was admitted), or drawn now; streamed (after
        the first step, which learns the call), those of the first finished groups (:meth:`_take_groups`)."""
        if self.buffer is not None:
            self.jobs[step] = self._take_groups(step) if self.call else Job(step, self._next_rows(
                self.buffer.batch_size), self.trained_position)
        if step not in self.jobs:
            self.jobs[step] = Job(step, self.draw(), self.position())
        return self.jobs[step].prompts

    def take(self, step: int, prompts: Batch, n: int, sampling: SamplingParams | None, stage: str) -> Job:
        """Step ``step``'s job (submitted, perhaps not finished: :meth:`wait`), for ``ctx.generate(prompts, n,
        sampling, stage)``; admits the jobs the mode allows first."""
        job = self.jobs.get(step)
        call = (n, sampling, stage)
        if self.call is None:
            self.call = call
        if job is None or prompts is not job.prompts or call != self.call:
            raise ConfigError(f"trainer.async_mode={self.mode} generates each step's batch ahead, once, from the "
                              "step's own prompts; this algorithm generates again or from other prompts within a "
                              "step (dynamic sampling, a greedy baseline): use trainer.async_mode=sync")
        if self.buffer is None:
            self._admit(step, step + 1 if self.mode == ONE_STEP_OFF else step + self.max_staleness)
            self.trained_position = job.position
        else:
            if job.batch is None:  # the first step: its own prompts, streamed
                self._stream(job.prompts)
            self._admit_groups()
        del self.jobs[step]
        return job

    def wait(self, job: Job) -> Batch:
        """``job``'s batch, once finished; the wait counts as the trainer's idle time, the job's span as the
        generator's busy time."""
        start = time.time()
        self.started = self.started or start
        if job.batch is not None:
            return job.batch
        if self.buffer is not None:
            return self._first_groups(job, start)
        batch = job.future.result()
        job.oldest = batch.get(VERSION_FIELD)
        self.waited_s += time.time() - start
        begin, end = job.future.span()
        self.generated_s += end - begin
        self.generator_span = (self.generator_span[0] if self.generator_span else begin, end)
        return batch

    def syncing(self, step: int) -> None:
        """The weights after ``step`` are about to be synced: the rollout role labels them ``step`` (partial
        rollouts' versions; an engine that names its weights, ``rollout=server``)."""
        self.rollout.weight_version = step

    def synced(self, step: int) -> None:
        """The weights after ``step`` were submitted to the rollout role: later jobs generate with them."""
        self.version = step
        if self.buffer is not None and self.call is not None:
            self._admit_groups()
        elif self.mode == FULLY_ASYNC and self.call is not None:
            self._admit(step + 1, step + 1 + self.max_staleness)

    def _admit(self, first: int, last: int) -> None:
        """Submit the job of every step from ``first`` to ``min(last, total_steps)`` not yet submitted, in
        order (drawing the prompts of those not yet drawn)."""
        for step in range(first, min(last, self.total_steps) + 1):
            self.prompts(step)
            job = self.jobs[step]
            if job.future is None:
                job.params, job.version = self._params(step), self.version
                job.future = submit(self.rollout, "generate", job.prompts, job.params)

    # ------------------------------------------------------------------ streamed groups (trainer.stream_groups)
    def _stream(self, prompts: Batch, regenerating: int = 0) -> None:
        """Submit the groups of ``prompts`` (rows of drawn batches) with the current weights: one streamed job
        per drawn batch, seeded as its step would be, each row keeping its index in its batch (which keys its
        randomness); ``regenerating`` > 0: the seed of that regeneration instead."""
        draws = [place(uid)[0] for uid in prompts["uid"]]
        for draw in dict.fromkeys(draws):
            params = self._params(draw)
            if regenerating:
                params = dataclasses.replace(params, seed=derive_seed(self.seed, draw, "regenerate", regenerating))
            rows = _rows_of(prompts, [row for row, of in enumerate(draws) if of == draw])
            self.versions.update(dict.fromkeys(rows["uid"], self.version))
            submit(self.rollout, GENERATE_STREAM, rows, params)

    def _next_rows(self, count: int) -> Batch:
        """The next ``count`` prompts neither submitted nor done, in draw order (drawing batches as needed;
        the position after each draw is kept)."""
        while len(self.unsubmitted) < count:
            prompts = self.draw()
            self.positions[self.position()[1]] = self.position()
            self.unsubmitted += [prompts.reorder([i]) for i, uid in enumerate(prompts["uid"])
                                 if uid not in self.buffer.done]
        rows, self.unsubmitted = self.unsubmitted[:count], self.unsubmitted[count:]
        return Batch.concat_padded(rows)

    def _admit_groups(self) -> None:
        """Submit prompts while the groups admitted and not yet taken or dropped stay within AReaL's bound
        ``(K + version + 1) × batch − groups taken``, and short of the groups the remaining steps need."""
        size = self.buffer.batch_size
        room = min(self.max_staleness + self.version + 1, self.total_steps) * size - self.taken_groups
        while (count := min(size, room - len(self.versions))) > 0:
            self._stream(self._next_rows(count))

    def _receive(self, wait: bool) -> None:
        """Move the groups the rollout streamed into the buffer; the span of their call counts as the
        generator's busy time."""
        for batch in self.rollout.streamed(wait):
            begin, end = batch.meta.pop("generated")
            last = self.generator_span[1] if self.generator_span else begin
            self.generated_s += max(0.0, end - max(begin, last))
            self.generator_span = (self.generator_span[0] if self.generator_span else begin, max(end, last))
            uid = batch["uid"][0]
            oldest = batch[VERSION_FIELD] if VERSION_FIELD in batch else torch.tensor([self.versions[uid]])
            self.buffer.arrive(Group(uid, int(oldest.min()), batch))

    def _take_groups(self, step: int) -> Job:
        """Step ``step``'s job: the buffer's first ``batch_size`` fresh groups (waited for; the wait is the
        trainer's idle time), the stale ones dropped or submitted again (``trainer.stale_policy``; the k-th
        regeneration of the run seeded ``derive_seed(seed, draw, "regenerate", k)``)."""
        start = time.time()
        self.started = self.started or start
        self._receive(wait=False)
        while True:
            taken, dropped, again = self.buffer.take(step)
            for group in dropped + again:
                del self.versions[group.uid]
            for k, group in enumerate(again, start=self.buffer.regenerated - len(again) + 1):
                self._stream(group.batch.reorder([0]), k)
            if taken is not None:
                break
            self._admit_groups()
            self._receive(wait=True)
        job = self._job(step, taken)
        job.waited_s = time.time() - start
        self.waited_s += job.waited_s
        return job

    def _first_groups(self, job: Job, start: float) -> Batch:
        """The first step's batch: the groups of its own draw, waited for (the other draws' groups stay in the
        buffer)."""
        uids = set(job.prompts["uid"])
        while len(arrived := [group for group in self.buffer.groups if group.uid in uids]) < len(uids):
            self._receive(wait=True)
        self.buffer.groups = [group for group in self.buffer.groups if group.uid not in uids]
        self.buffer.done.update(uids)
        self.waited_s += time.time() - start
        streamed = self._job(job.step, sorted(arrived, key=lambda group: place(group.uid)))
        job.oldest = streamed.oldest
        return streamed.batch

    def _job(self, step: int, groups: list[Group]) -> Job:
        """Step ``step``'s job made of finished ``groups``: their prompts and their responses, each row stamped
        with its group's version, ``meta["metrics"]`` the sums of the groups' (partial rollouts:
        ``async/interrupted|resumed``); the groups leave the admitted count, and the checkpoint's data position
        becomes the one before the first drawn batch with a prompt not done."""
        counts = [group.batch.meta.pop("metrics", {}) for group in groups]
        for group in groups:
            del self.versions[group.uid]
        self.taken_groups += len(groups)
        pad = groups[0].batch.meta["pad_token_id"]
        batch = Batch.concat_padded([group.batch for group in groups], {"responses": pad})
        batch.meta = {**batch.meta, "metrics": summed(counts)}
        prompts = Batch.concat_padded([group.batch.exclude(*GENERATED_FIELDS).reorder([0]) for group in groups])
        oldest = batch[VERSION_FIELD] if VERSION_FIELD in batch else torch.cat(
            [torch.full((len(group.batch),), group.version, dtype=torch.long) for group in groups])
        first = self.buffer.first_open(max(self.positions))
        self.trained_position = self.positions[first - 1]
        return Job(step, prompts, self.trained_position, version=int(oldest.min()), oldest=oldest, batch=batch)

    def stream_record(self) -> list[str] | None:
        """Streamed: the prompts (uids) done in the drawn batches after the checkpoint's data position."""
        return None if self.buffer is None else sorted(self.buffer.done)

    def _params(self, step: int) -> SamplingParams:
        """The learned call's sampling for ``step``, seeded as :meth:`StepContext.generate` seeds it."""
        n, sampling, stage = self.call
        params = dataclasses.replace(sampling or self.sampling, n=n)
        if params.seed is None:
            params = dataclasses.replace(params, seed=derive_seed(self.seed, step, stage, 0))
        return params

    def metrics(self, step: int, batch: Batch) -> dict[str, float]:
        """:meth:`_batch_metrics`, and, streamed, ``async/dropped`` and ``async/regenerated``: the run's stale
        groups so far (``trainer.stale_policy``)."""
        metrics = self._batch_metrics(step, batch)
        if self.buffer is not None:
            metrics.update({"async/dropped": float(self.buffer.dropped),
                            "async/regenerated": float(self.buffer.regenerated),
                            "async/buffer_samples": float(len(self.versions) * self.call[0])})
        return metrics

    def _batch_metrics(self, step: int, batch: Batch) -> dict[str, float]:
        """``async/staleness/mean|max`` (versions between the trainer's, ``step - 1``, and each sample's),
        ``async/buffer_samples`` (samples admitted, not yet trained: finished or generating),
        ``async/trainer_idle_frac`` (the time since the first step took its batch spent waiting for one),
        ``async/generator_idle_frac`` (the generator's time between its first job's start and its last
        finished job's end spent on no job)."""
        staleness = (step - 1 - batch["weight_version"]).float()
        ahead = sum(len(job.prompts) for job in self.jobs.values() if job.future) * self.call[0]
        wall = time.time() - self.started
        span = self.generator_span[1] - self.generator_span[0]
        return {"async/staleness/mean": float(staleness.mean()), "async/staleness/max": float(staleness.max()),
                "async/buffer_samples": float(ahead), "async/trainer_idle_frac": self.waited_s / wall,
                "async/generator_idle_frac": max(0.0, 1.0 - self.generated_s / span) if span > 0 else 0.0}

    def refuse_more_prompts(self) -> Batch:
        """A pipelined step's ``ctx.more_prompts()``: the prompts are drawn ahead, so none can be drawn within."""
        raise ConfigError(f"trainer.async_mode={self.mode} draws each step's prompts ahead; this algorithm draws "
                          "more within a step (dynamic sampling): use trainer.async_mode=sync")


def _rows_of(batch: Batch, rows: list[int]) -> Batch:
    """The prompt fields of ``batch``'s ``rows``, each with its index in its drawn batch (from its uid) as its
    :data:`~rlloom.batch.PROMPT_INDEX_FIELD`, which keys its randomness."""
    picked = batch.exclude(*GENERATED_FIELDS, PROMPT_INDEX_FIELD).reorder(rows)
    picked[PROMPT_INDEX_FIELD] = torch.tensor([place(uid)[1] for uid in picked["uid"]], dtype=torch.long)
    return picked


@dataclass
class PipelinedContext(StepContext):
    """A training step's context in an async mode: ``generate`` returns the step's job (the batch, stamped with
    the version that generated it; ``timing_s/gen`` is the wait for it, streamed the wait for the step's groups
    before it began) and adds the pipeline's ``async/*`` metrics; ``sync_weights`` tells the pipeline, which may
    admit more jobs."""

    pipeline: RolloutPipeline | None = None

    def generate(self, prompts: Batch, n: int, sampling: SamplingParams | None = None, stage: str = "gen") -> Batch:
        job = self.pipeline.take(self.step, prompts, n, sampling, stage)
        roles = self.roles
        held = roles.agent_rollout, roles.weight_version
        roles.agent_rollout, roles.weight_version = (lambda _prompts, _params: self.pipeline.wait(job)), job.version
        try:
            batch = super().generate(prompts, n, sampling, stage)
        finally:
            roles.agent_rollout, roles.weight_version = held
        if job.oldest is not None:
            batch[VERSION_FIELD] = job.oldest
        self._add_time(stage, job.waited_s)
        self.metrics.update(self.pipeline.metrics(self.step, batch))
        return batch

    def sync_weights(self) -> None:
        self.pipeline.syncing(self.step)
        super().sync_weights()
        self.pipeline.synced(self.step)

