"""The async pipeline's schedule (:mod:`rlloom_trainer.pipeline`): which job is submitted when, with which
weights, and what a checkpoint records — driven as the trainer drives it (``prompts`` → ``take`` → ``synced``),
over a rollout role that records its calls."""

from __future__ import annotations

import pytest
import torch
from rlloom.batch import Batch
from rlloom.config import ConfigError
from rlloom.controller.futures import Completed
from rlloom.controller.step import derive_seed
from rlloom.types import SamplingParams
from rlloom_trainer.pipeline import FULLY_ASYNC, ONE_STEP_OFF, RolloutPipeline

ROWS, N = 2, 3  # prompts per batch, samples per prompt


class RecordingRollout:
    """A rollout role outside the process: records each submitted call with the pipeline's version at the
    time, and answers with the prompts repeated n times."""

    def __init__(self) -> None:
        self.calls: list[tuple[str, int, SamplingParams]] = []
        self.pipeline: RolloutPipeline | None = None

    def submit_call(self, method: str, args: tuple, kwargs: dict) -> Completed:
        prompts, params = args
        self.calls.append((prompts["uid"][0], self.pipeline.version, params))
        return Completed(prompts.repeat(params.n), 0.0, 1.0)


def make_pipeline(mode: str, max_staleness: int = 1, total_steps: int = 6) -> tuple[RolloutPipeline, list[int]]:
    draws = [0]

    def draw() -> Batch:
        draws[0] += 1
        return Batch(objects={"uid": [f"draw{draws[0]}-{i}" for i in range(ROWS)]})

    rollout = RecordingRollout()
    pipeline = RolloutPipeline(mode, rollout, draw, lambda: ({"offset": draws[0]}, draws[0]), SamplingParams(),
                               seed=7, total_steps=total_steps, max_staleness=max_staleness)
    rollout.pipeline = pipeline
    return pipeline, draws


def run_steps(pipeline: RolloutPipeline, steps: int) -> list[tuple[int, int]]:
    """Drive ``steps`` steps as the trainer does; returns (step, version of the batch it trained)."""
    trained = []
    for step in range(1, steps + 1):
        prompts = pipeline.prompts(step)
        job = pipeline.take(step, prompts, N, None, "gen")
        assert len(pipeline.wait(job)) == ROWS * N
        trained.append((step, job.version))
        pipeline.synced(step)
    return trained


def test_one_step_off_trains_each_batch_one_version_behind_after_the_first():
    pipeline, _ = make_pipeline(ONE_STEP_OFF)
    trained = run_steps(pipeline, 6)
    assert trained == [(1, 0), (2, 0), (3, 1), (4, 2), (5, 3), (6, 4)]
    rollout = pipeline.rollout
    assert [uid for uid, _, _ in rollout.calls] == [f"draw{k}-0" for k in range(1, 7)]  # each batch once, in order
    assert [params.seed for _, _, params in rollout.calls] == [derive_seed(7, k, "gen", 0) for k in range(1, 7)]
    assert all(params.n == N for _, _, params in rollout.calls)


@pytest.mark.parametrize("staleness", [0, 1, 2, 3])
def test_fully_async_admits_at_most_k_plus_version_plus_one_batches(staleness):
    pipeline, _ = make_pipeline(FULLY_ASYNC, staleness, total_steps=8)
    rollout = pipeline.rollout
    trained = run_steps(pipeline, 8)
    for admitted, (_, version, _) in enumerate(rollout.calls, start=1):  # AReaL's capacity, in samples
        assert admitted * ROWS * N <= (staleness + version + 1) * ROWS * N
    assert all(step - 1 - version <= staleness for step, version in trained)
    assert max(step - 1 - version for step, version in trained) == staleness  # eager: the bound is reached
    assert len(rollout.calls) == 8  # never past total_steps


def test_fully_async_without_staleness_generates_each_batch_after_the_previous_update():
    pipeline, _ = make_pipeline(FULLY_ASYNC, 0)
    assert run_steps(pipeline, 5) == [(k, k - 1) for k in range(1, 6)]


def test_a_checkpoint_records_the_position_after_the_last_trained_batch_not_the_last_drawn():
    pipeline, draws = make_pipeline(FULLY_ASYNC, 2)
    run_steps(pipeline, 2)
    assert draws[0] == 5  # batches 3 to 5 were drawn ahead (K + version + 1 = 5 after the second sync)
    assert pipeline.trained_position == ({"offset": 2}, 2)


def test_a_second_generation_within_a_step_is_a_config_error():
    pipeline, _ = make_pipeline(ONE_STEP_OFF)
    prompts = pipeline.prompts(1)
    pipeline.take(1, prompts, N, None, "gen")
    with pytest.raises(ConfigError, match="trainer.async_mode=one_step_off.*trainer.async_mode=sync"):
        pipeline.take(1, prompts, N, SamplingParams(temperature=0.0), "greedy")
    with pytest.raises(ConfigError, match="trainer.async_mode=one_step_off draws each step's prompts ahead"):
        pipeline.refuse_more_prompts()


def test_metrics_are_the_staleness_of_the_batch_and_the_admitted_samples():
    pipeline, _ = make_pipeline(FULLY_ASYNC, 2)
    run_steps(pipeline, 3)
    batch = Batch({"weight_version": torch.tensor([0, 0, 1, 1])})
    metrics = pipeline.metrics(4, batch)
    assert metrics["async/staleness/mean"] == 2.5 and metrics["async/staleness/max"] == 3.0
    assert metrics["async/buffer_samples"] == 3 * ROWS * N  # steps 4 to 6 admitted (K + 3 + 1), not trained
    assert 0.0 <= metrics["async/trainer_idle_frac"] <= 1.0


def test_the_rollout_must_live_outside_the_trainers_process():
    with pytest.raises(ConfigError, match="needs the rollout role outside the trainer's process"):
        RolloutPipeline(ONE_STEP_OFF, object(), lambda: None, lambda: ({}, 0), SamplingParams(), 0, 3, 1)


class LabellingRollout(RecordingRollout):
    """A rollout process with partial rollouts: answers ``partial_rollouts`` (or refuses it with the process's
    TypeError), and keeps the ``weight_version`` label the pipeline sets before each sync."""

    def __init__(self, refuse: bool = False) -> None:
        super().__init__()
        self.refuse, self.weight_version, self.turned_on_at = refuse, None, None

    def submit_call(self, method: str, args: tuple, kwargs: dict) -> Completed:
        if method != "partial_rollouts":
            return super().submit_call(method, args, kwargs)
        if self.refuse:
            raise TypeError("trainer.partial_rollout=true: the rollout engine Plain cannot withdraw rows")
        self.turned_on_at = args[0]
        return Completed(None, 0.0, 0.0)


def test_partial_rollouts_turn_on_at_the_pipelines_version_and_each_sync_is_labelled_with_its_step():
    rollout = LabellingRollout()
    pipeline = RolloutPipeline(FULLY_ASYNC, rollout, lambda: Batch(objects={"uid": ["draw-0"]}), lambda: ({}, 0),
                               SamplingParams(), 0, 6, 2, version=3, partial=True)
    rollout.pipeline = pipeline
    assert rollout.turned_on_at == 3 and rollout.weight_version is None
    pipeline.syncing(4)
    assert rollout.weight_version == 4
    with pytest.raises(ConfigError, match="trainer.partial_rollout=true: the rollout engine Plain"):
        RolloutPipeline(FULLY_ASYNC, LabellingRollout(refuse=True), lambda: None, lambda: ({}, 0), SamplingParams(),
                        0, 6, 2, partial=True)
