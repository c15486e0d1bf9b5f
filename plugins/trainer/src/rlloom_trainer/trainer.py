"""The generic training loop: build the run from its validated config, then step, validate, log,
checkpoint; resume from the latest complete checkpoint.

The loop knows nothing about any RL method: each step hands a prompt batch to the algorithm's
``step(ctx, prompts)`` (see :mod:`rlloom.controller.step`). An algorithm that keeps state across
steps (e.g. an adaptive KL coefficient) exposes ``state_dict()`` / ``load_state_dict(state)``
(:class:`rlloom.protocols.StatefulAlgorithm`); the trainer saves and restores it with the checkpoints.
"""

from __future__ import annotations

import json
import os
import random
import resource
import signal
import sys
import time
import warnings
from typing import Any

import numpy as np
import torch
from omegaconf import OmegaConf
from rlloom.batch import Batch
from rlloom.config import ConfigError, ResolvedConfig
from rlloom.config.roles import declared_roles
from rlloom.config.run_name import run_dir_of
from rlloom.controller.roles import quiet_transformers
from rlloom.controller.step import Roles, StepContext
from rlloom.data import PromptRecord
from rlloom.errors import RoleStartError
from rlloom.plugins.registry import Registry, get_registry
from rlloom.protocols import (
    ChecksModel,
    CountsInvalidRows,
    PlansOptimizerSteps,
    RewindsRecord,
    StartsWithOtherWeights,
    StatefulAlgorithm,
)
from rlloom.types import EngineSpec, RoleSpec, SamplingParams
from rlloom_enginekit.lora import check_weight_sync, reference_role

from rlloom_trainer.checkpoint import DISK_FULL_ERRNOS, RESUME_MARKER, Checkpoint, CheckpointError, CheckpointManager
from rlloom_trainer.agents import multi_turn, start_agent_runner
from rlloom_trainer.dumps import dump_rollouts
from rlloom_trainer.export import save_hf_folder
from rlloom_trainer.guards import NonFiniteGuard, TrainingAborted
from rlloom_trainer.local import LocalLauncher
from rlloom_trainer.pipeline import SYNC, PipelinedContext, RolloutPipeline, check_async
from rlloom_trainer.progress import phase
from rlloom_trainer.prompts import PromptEncoder, PromptIterator, check_context
from rlloom_trainer.record import absolute_paths, record_yaml
from rlloom_trainer.resume import FINAL_METRICS, resume_target
from rlloom_trainer.run_state import TrainerState, rng_state, set_rng_state
from rlloom_trainer.sigint import received
from rlloom_trainer.streaming import GroupBuffer
from rlloom_trainer.validation import validate


def seed_everything(seed: int) -> None:
    random.seed(seed)
    np.random.seed(seed)
    torch.manual_seed(seed)


ENGINE_GROUPS = ("train_engine", "rollout")


def check_prompt_counts(train: int, train_kept: int, val_kept: int, cfg: Any) -> None:
    """ConfigError unless ``trainer.max_prompt_length`` leaves at least one validation prompt and
    ``trainer.train_batch_size`` training prompts of the dataset's ``train``."""
    if train_kept < cfg.train_batch_size or val_kept == 0:
        raise ConfigError(
            f"trainer.train_batch_size={cfg.train_batch_size}, trainer.max_prompt_length={cfg.max_prompt_length}: "
            f"{train_kept} of the dataset's {train} training prompts fit (and {val_kept} validation prompts); a step "
            f"needs train_batch_size of them and validation at least one. Raise trainer.max_prompt_length, lower "
            f"trainer.train_batch_size, or use more data."
        )


def sampling_params(sampling_cfg: Any) -> SamplingParams:
    """The rollout's :class:`SamplingParams` for the ``sampling`` config section (n=1, no seed)."""
    return SamplingParams(
        temperature=sampling_cfg.temperature, top_p=sampling_cfg.top_p, top_k=sampling_cfg.top_k,
        max_new_tokens=sampling_cfg.max_new_tokens, ignore_eos=sampling_cfg.ignore_eos,
    )


def peak_rss_gb() -> float:
    """Peak resident memory of this process so far, in GB (Linux reports ru_maxrss in KiB)."""
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024 / 1e9


class Trainer:
    """One run: its roles, data, trackers and loop."""

    def __init__(self, resolved: ResolvedConfig, registry: Registry | None = None) -> None:
        self.started = time.perf_counter()
        self._resume_metrics: dict[str, float] = {}  # logged with the first row after a resume
        self.resolved = resolved
        self.registry = registry = registry or get_registry()
        sections, choices = resolved.sections, resolved.choices
        self.config = sections["trainer"]
        self.multi_turn = multi_turn(resolved)  # before anything is written: a ConfigError when the launcher cannot
        check_async(resolved)
        check_weight_sync(sections, choices)  # LoRA and the resharder: before anything is written
        seed_everything(self.config.seed)
        self.run_dir = run_dir_of(self.config)
        # as recorded: a resume typed with relative paths or with the recorded config compares equal
        self.run_config = absolute_paths(OmegaConf.to_container(resolved.cfg, resolve=True))
        self.checkpoints = CheckpointManager(self.run_dir, self.config.keep_last_n)
        resume_from = resume_target(resolved, self.run_dir)
        os.makedirs(self.run_dir, exist_ok=True)
        self.record = record_yaml(resolved, registry)  # once: provenance runs git, and is the run's start
        with open(os.path.join(self.run_dir, "config.yaml"), "w", encoding="utf-8") as f:
            f.write(self.record)

        self.algorithm = registry.build("algorithm", choices["algorithm"], sections["algorithm"])
        try:
            self.launcher = registry.build("launcher", choices["launcher"], sections["launcher"])
        except Exception as error:  # noqa: BLE001 - reported as one paragraph, the cause chained
            raise RoleStartError("launcher", f"launcher={choices['launcher']}", error) from error
        try:
            self._setup(resume_from)
        except BaseException:
            self.launcher.shutdown()  # workers (Ray actors, process groups) must not outlive a failed start
            raise
        self.trackers = self._start_trackers()
        self._announce_resume(resume_from, self._rewind_trackers())

    def _setup(self, resume_from: Checkpoint | None) -> None:
        """Everything after the launcher: model, data, roles, and the restore of ``resume_from``."""
        registry, sections, choices = self.registry, self.resolved.sections, self.resolved.choices
        try:  # the data first: a bad file is reported before any model is built
            dataset = registry.build("data", choices["data"], sections["data"], self.config.seed)
        except Exception as error:  # noqa: BLE001 - reported as one paragraph, the cause chained
            raise RoleStartError("data", f"data={choices['data']}", error) from error
        quiet_transformers()
        try:
            with phase(f"preparing model={choices['model']}"):
                self.model_path = registry.build("model", choices["model"], sections["model"])
        except Exception as error:  # noqa: BLE001 - reported as one paragraph, the cause chained
            raise RoleStartError("model", f"model={choices['model']}", error) from error
        self._check_model_fits_engines()
        check_context(self.model_path, sections["sampling"].max_new_tokens)

        from transformers import AutoTokenizer

        self.tokenizer = AutoTokenizer.from_pretrained(self.model_path)
        self.encoder = PromptEncoder(self.tokenizer, self.config.max_prompt_length)
        train_records = self.encoder.filter(dataset.train)
        self.val_records = self.encoder.filter(dataset.val)
        self.prompts_dropped = len(dataset.train) + len(dataset.val) - len(train_records) - len(self.val_records)
        self.invalid_rows = dataset.num_invalid if isinstance(dataset, CountsInvalidRows) else 0
        if self.config.val_max_prompts:
            self.val_records = self.val_records[: self.config.val_max_prompts]
        check_prompt_counts(len(dataset.train), len(train_records), len(self.val_records), self.config)
        self.data = PromptIterator(train_records, self.config.train_batch_size, self.config.seed)

        self.sampling = sampling_params(sections["sampling"])
        with phase("starting the engines"):
            self.roles = self._start_roles()
        self.agent_runner = self._start_agent_runner() if self.multi_turn else None
        self.roles.agent_rollout = self.agent_runner
        self.guard = NonFiniteGuard(self.config.max_nonfinite_steps, self.run_dir)
        self.step = 0
        self.draws = 0
        self.streamed_done: list[str] = []  # trainer.stream_groups: the prompts done past the data position
        self.last_metrics: dict[str, float] = {}  # the latest step's, saved with each checkpoint
        if resume_from is not None:
            self._restore(resume_from)
        elif self._rollout_starts_with_other_weights():
            with phase("pushing the starting weights to the rollout engine"):
                self.roles.resharder.sync(self.roles.actor, self.roles.rollout)
        self.pipeline = None if self.config.async_mode == SYNC else RolloutPipeline(
            self.config.async_mode, self.roles.rollout, self.next_training_prompts,
            lambda: (self.data.state(), self.draws), self.sampling, self.config.seed, self.config.total_steps,
            self.config.max_staleness, version=self.roles.weight_version, partial=self.config.partial_rollout,
            buffer=GroupBuffer(self.config.train_batch_size, self.config.max_staleness, self.config.stale_policy,
                               done=set(self.streamed_done)) if self.config.stream_groups else None)

    def _rollout_starts_with_other_weights(self) -> bool:
        """Whether the rollout engine may not hold the run's starting weights (a server started
        elsewhere: :class:`~rlloom.protocols.StartsWithOtherWeights`), so that a fresh run pushes them
        before step 0; a resumed run always does (:meth:`_restore`)."""
        rollout_cfg = self.resolved.sections["rollout"]
        return isinstance(rollout_cfg, StartsWithOtherWeights) and rollout_cfg.starts_with_other_weights()

    def _check_model_fits_engines(self) -> None:
        """Each engine config's ``check_model(model_path, run_device)`` (:class:`~rlloom.protocols.ChecksModel`:
        shapes an engine cannot run, e.g. a head size without a kernel), before any weights load: a
        ValueError is a config error naming the engine choice. Only with ``launcher=local``: elsewhere
        the engines' machines (their devices, their packages) decide, and the engines check when they start."""
        if self.resolved.choices["launcher"] != "local":
            return
        for group in ENGINE_GROUPS:
            engine_cfg = self.resolved.sections[group]
            if not isinstance(engine_cfg, ChecksModel):
                continue
            try:
                engine_cfg.check_model(self.model_path, self.config.device)
            except ValueError as error:
                choice = f"{group}={self.resolved.choices[group]}"
                message = str(error)
                raise ConfigError(message if message.startswith(choice) else f"{choice}: {message}") from None

    # ------------------------------------------------------------------------------ checkpoints
    def _restore(self, checkpoint: Checkpoint) -> None:
        """Load engines, counters, data position, algorithm and RNG states; re-sync rollout weights."""
        for role, engine in self.roles.trained().items():
            engine.load(os.path.join(checkpoint.path, role))
        state = TrainerState.read(checkpoint.path)
        self.step, self.draws, self.last_metrics = state.step, state.draws, state.metrics
        self.streamed_done = state.streamed or []
        self.data.load_state(state.data)
        self.guard.consecutive = state.nonfinite_in_a_row
        if state.algorithm is not None:
            if not isinstance(self.algorithm, StatefulAlgorithm):
                raise CheckpointError(f"{checkpoint.path} holds algorithm state but the algorithm cannot load it")
            self.algorithm.load_state_dict(state.algorithm)
        self.roles.resharder.sync(self.roles.actor, self.roles.rollout)
        self.roles.weight_version = self.step
        set_rng_state(state.rng)

    def save_checkpoint(self) -> Checkpoint:
        """Write ``checkpoints/global_step_<step>`` atomically (see :mod:`rlloom_trainer.checkpoint`)."""

        data, draws = self.pipeline.trained_position if self.pipeline else (self.data.state(), self.draws)

        def write(folder: str) -> None:
            for role, engine in self.roles.trained().items():
                engine.save(os.path.join(folder, role))
            TrainerState(
                step=self.step,
                draws=draws,
                data=data,
                nonfinite_in_a_row=self.guard.consecutive,
                algorithm=self.algorithm.state_dict() if isinstance(self.algorithm, StatefulAlgorithm) else None,
                rng=rng_state(),
                choices=dict(self.resolved.choices),
                config=self.run_config,
                model_path=self.model_path,
                optimizer_steps=self.optimizer_steps,
                metrics=self.last_metrics,
                streamed=self.pipeline.stream_record() if self.pipeline else None,
            ).save(folder)
            with open(os.path.join(folder, "config.yaml"), "w", encoding="utf-8") as f:
                f.write(self.record)

        return self.checkpoints.save(self.step, write)

    def _start_roles(self) -> Roles:
        """Every role through the launcher; optimizer steps (for LR schedules) = total_steps × the
        algorithm config's optimizer steps per step (:class:`~rlloom.protocols.PlansOptimizerSteps`; 1 without).
        An async mode with ``launcher=local`` starts the rollout in a process of its own
        (:meth:`~rlloom_trainer.local.LocalLauncher.start_role_apart`)."""
        sections, choices, registry = self.resolved.sections, self.resolved.choices, self.registry
        plan = sections["algorithm"]
        per_step = 1
        if isinstance(plan, PlansOptimizerSteps):
            per_step = plan.optimizer_steps_per_step(self.config.train_batch_size)
        self.optimizer_steps = self.config.total_steps * per_step

        asynchronous = self.config.async_mode != SYNC

        def start(role: str, kind: str, group: str, engine: bool = True, engine_role: str | None = None,
                  apart: bool = False) -> Any:
            engine_spec = EngineSpec(self.model_path, engine_role or role, self.config.seed, self.optimizer_steps,
                                     self.config.device)
            spec = RoleSpec(role, kind, choices[group], sections[group], engine_spec if engine else None)
            try:
                if apart and isinstance(self.launcher, LocalLauncher):
                    return self.launcher.start_role_apart(spec)
                return self.launcher.start_role(spec, registry)
            except Exception as error:  # noqa: BLE001 - reported as one paragraph, the cause chained
                raise RoleStartError(role, f"{group}={choices[group]}", error) from error

        actor = start("actor", "train_engine", "train_engine")
        ref = None
        if self.algorithm.needs_reference:  # a LoRA actor serves the reference itself (adapters off)
            ref = reference_role(sections["train_engine"], actor) or start("ref", "train_engine", "train_engine")
        critic = start("critic", "train_engine", "train_engine") if self.algorithm.needs_critic else None
        declared = declared_roles(plan)
        engines = {role: start(role.name, "train_engine", "train_engine", engine_role=role.serves_as)
                   for role in declared if role.kind == "train_engine"}
        rollout = start("rollout", "rollout", "rollout", apart=asynchronous)
        reward_fn = start("reward", "reward", "reward", engine=False)
        functions = {role: start(role.name, "reward", role.name, engine=False)
                     for role in declared if role.kind == "reward"}
        return Roles(
            rollout=rollout,
            actor=actor,
            ref=ref,
            critic=critic,
            reward_fn=reward_fn,
            declared={**engines, **functions},
            resharder=start("resharder", "resharder", "resharder", engine=False),
            sleep_rollout=self.config.sleep_rollout and not asynchronous,  # an async rollout never idles to sleep
            offload_train_engines=self.config.offload_train_engines,
        )

    def _start_agent_runner(self) -> Any:
        """The multi-turn agent's runner over the rollout engine (:func:`rlloom_trainer.agents.start_agent_runner`)."""
        choice = f"agent={self.resolved.choices['agent']}"
        try:
            return start_agent_runner(self.resolved, self.registry, self.roles.rollout, self.tokenizer, self.model_path)
        except Exception as error:  # noqa: BLE001 - reported as one paragraph, the cause chained
            raise RoleStartError("agent", choice, error) from error

    def _start_trackers(self) -> list[Any]:
        """Build ``jsonl`` and ``trainer.trackers``: ``metrics.jsonl`` is the run folder's own record (``rlloom plot``,
        resume's rewind), kept whatever else is listed. One that fails to start is left out with a warning."""
        trackers = []
        for name in ["jsonl", *(name for name in self.config.trackers if name != "jsonl")]:
            try:
                trackers.append(self.registry.build("tracker", name, self.run_dir, self.run_config))
            except Exception as error:  # noqa: BLE001 - a tracker must never kill the run
                warnings.warn(f"tracker {name} failed to start and is disabled: {error}", stacklevel=2)
        return trackers

    def _rewind_trackers(self) -> list[str]:
        """Trackers that can rewind (:class:`~rlloom.protocols.RewindsRecord`) forget what an earlier,
        interrupted process logged after ``step`` (the resumed step, or -1 for a fresh start), so a
        resumed run's records equal an uninterrupted run's. Returns what they said they dropped."""
        dropped = []
        for tracker in self.trackers:
            said = tracker.rewind(self.step if self.step else -1) if isinstance(tracker, RewindsRecord) else None
            if said:
                dropped.append(said)
        return dropped

    def _announce_resume(self, checkpoint: Checkpoint | None, dropped: list[str]) -> None:
        """Say on stderr which checkpoint the run resumed from (and what the interrupted run's
        records lost); the first row logged after a resume carries ``RESUME_MARKER``
        (``training/resumed_from_step``)."""
        if checkpoint is not None:
            self._resume_metrics = {RESUME_MARKER: float(self.step)}
            message = f"rlloom: resumed from {checkpoint.path} (step {self.step})"
        elif dropped:
            message = f"rlloom: no checkpoint in {self.run_dir}: starting over"
        else:
            return
        if dropped:
            message += f"; dropped what the interrupted run logged after it: {'; '.join(dropped)}"
        print(message, file=sys.stderr, flush=True)

    def log(self, metrics: dict[str, float], step: int) -> None:
        """Send ``metrics`` (plus ``training/wall_clock_s``, seconds since the run started building) to
        every tracker. A tracker that cannot write its files (an ``OSError`` whose errno is in
        :data:`DISK_FULL_ERRNOS`: a full disk, a quota, a file too large) stops the run with
        :class:`~rlloom_trainer.guards.TrainingAborted` — losing the run's record silently is worse; the last
        checkpoint is where a re-run resumes. A tracker failing otherwise (a service that is down, a
        ``ConnectionError``) is dropped with a warning."""
        metrics["training/wall_clock_s"] = time.perf_counter() - self.started
        metrics.update(self._resume_metrics)
        self._resume_metrics = {}
        for tracker in list(self.trackers):
            try:
                tracker.log(metrics, step)
            except Exception as error:  # noqa: BLE001 - a tracker must never kill the run, bar a full disk
                if isinstance(error, OSError) and error.errno in DISK_FULL_ERRNOS:
                    raise self._record_lost(tracker, step, error) from error
                warnings.warn(f"tracker {type(tracker).__name__} failed and is disabled: {error}", stacklevel=2)
                self.trackers.remove(tracker)

    def _record_lost(self, tracker, step: int, error: OSError) -> TrainingAborted:
        latest = self.checkpoints.latest()
        return TrainingAborted(
            f"tracker {type(tracker).__name__} could not record step {step} ({error}); the run stops rather "
            f"than lose its record. Free space in {self.run_dir} and re-run with "
            f"trainer.run_dir={self.run_dir}: "
            + (f"it resumes from {latest.path} (step {latest.step})." if latest
               else "it starts over (no checkpoint yet).")
        )

    def context(self, training: bool = False) -> StepContext:
        """The controller API for one step; ``training`` contexts can draw more training prompts (in an async
        mode, a :class:`~rlloom_trainer.pipeline.PipelinedContext`, whose prompts were drawn ahead)."""
        if training and self.pipeline is not None:
            return PipelinedContext(self.roles, self.tokenizer, self.sampling, self.step,
                                    self.pipeline.refuse_more_prompts, seed=self.config.seed, pipeline=self.pipeline)
        return StepContext(self.roles, self.tokenizer, self.sampling, self.step,
                           self.next_training_prompts if training else None, seed=self.config.seed)

    def next_training_prompts(self) -> Batch:
        """The next training batch; every draw gets its own uids (``draw<k>-<row>``)."""
        self.draws += 1
        return self.encode(self.data.next_batch(), f"draw{self.draws}")

    # ------------------------------------------------------------------------------ loop
    def encode(self, records: list[PromptRecord], tag: str) -> Batch:
        prompts = self.encoder.encode(records)
        prompts["uid"] = [f"{tag}-{i}" for i in range(len(records))]
        return prompts

    def validate(self) -> dict[str, float]:
        """Sampled and greedy accuracy on the validation prompts (:func:`rlloom_trainer.validation.validate`)."""
        prompts = self.encode(self.val_records, f"val{self.step}")
        return validate(self.context(), prompts, self.sampling, self.config)

    def fit(self) -> dict[str, float]:
        """Run steps up to ``trainer.total_steps`` (from the resumed step, if any); returns the last
        step's metrics with the final validation. Checkpoints every ``trainer.save_freq`` steps and
        after the last; stops with :class:`~rlloom_trainer.guards.TrainingAborted` after
        ``trainer.max_nonfinite_steps`` non-finite steps in a row."""
        final_path = os.path.join(self.run_dir, FINAL_METRICS)
        if self.step >= self.config.total_steps and os.path.isfile(final_path):
            with open(final_path, encoding="utf-8") as f:
                return json.load(f)
        final = self.last_metrics  # a run resumed from its final checkpoint only has its end left
        if self.config.val_before_train and self.step == 0:
            self.log(self.validate(), self.step)
        while self.step < self.config.total_steps:
            if received():  # a signal whose KeyboardInterrupt a library swallowed still stops the run
                raise KeyboardInterrupt
            self.step += 1
            start = time.perf_counter()
            ctx = self.context(training=True)
            prompts = self.pipeline.prompts(self.step) if self.pipeline else self.next_training_prompts()
            metrics = self.algorithm.step(ctx, prompts)
            metrics["timing_s/step"] = time.perf_counter() - start
            trained_data = self.pipeline.trained_position[0] if self.pipeline else self.data.state()
            metrics["training/epoch"] = float(trained_data["epoch"])  # of the step's prompts, not those drawn ahead
            metrics["data/prompts_dropped"] = float(self.prompts_dropped)
            metrics["data/invalid_rows"] = float(self.invalid_rows)
            metrics["perf/cpu_memory_peak_gb"] = peak_rss_gb()
            tokens = float(ctx.metrics.get("perf/total_tokens", 0.0))
            if tokens:
                metrics["perf/throughput"] = tokens / metrics["timing_s/step"]
            is_last = self.step == self.config.total_steps
            if is_last or (self.config.test_freq and self.step % self.config.test_freq == 0):
                metrics.update(self.validate())
            self.log(metrics, self.step)
            self.guard.check(self.step, metrics)
            if self.config.dump_rollouts and ctx.last_batch is not None:
                dump_rollouts(ctx.last_batch, self.config.dump_rollouts, self.run_dir, self.step)
            self.last_metrics = final = metrics
            if is_last or (self.config.save_freq and self.step % self.config.save_freq == 0):
                self.save_checkpoint()
        if self.config.save_final_model:
            save_hf_folder(self.roles.actor.named_weights(), self.model_path, os.path.join(self.run_dir, "final_model"))
        with open(final_path, "w", encoding="utf-8") as f:
            json.dump(final, f, indent=1, sort_keys=True)
        return final

    def close(self) -> None:
        """Close the trackers (one that fails — a full disk — is reported, not raised, so that the
        error that ended the run stays the one the user sees) and shut the launcher down."""
        try:
            for tracker in self.trackers:
                try:
                    tracker.close()
                except Exception as error:  # noqa: BLE001 - see the docstring
                    warnings.warn(f"tracker {type(tracker).__name__} failed to close: {error}", stacklevel=2)
        finally:
            if self.agent_runner is not None:
                self.agent_runner.close()
            self.launcher.shutdown()

