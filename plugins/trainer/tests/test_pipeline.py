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
from rlloom.batch import PROMPT_INDEX_FIELD
from rlloom_trainer.pipeline import FULLY_ASYNC, ONE_STEP_OFF, RolloutPipeline
from rlloom_enginekit.stream_calls import GENERATE_STREAM
from rlloom_trainer.streaming import DROP, REGENERATE, Group, GroupBuffer, place

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


# ---------------------------------------------------------------------------------------- streamed groups
class StreamingRollout:
    """A rollout process streaming groups: each wait for groups releases the pending group that finishes first
    (:meth:`order`); nothing finishes unless the trainer waits. Records each job (its uids, the pipeline's
    version, its seed)."""

    def __init__(self) -> None:
        self.calls: list[tuple[list[str], int, int]] = []
        self.pending: list[Batch] = []
        self.indices: list[list[int]] = []  # each job's prompt indices
        self.pipeline: RolloutPipeline | None = None

    def submit_call(self, method: str, args: tuple, kwargs: dict) -> Completed:
        if method == GENERATE_STREAM:
            prompts, params = args
            self.calls.append((list(prompts["uid"]), self.pipeline.version, params.seed))
            self.indices.append(prompts[PROMPT_INDEX_FIELD].tolist())
            for row in range(len(prompts)):
                group = prompts.exclude(PROMPT_INDEX_FIELD).reorder([row] * params.n)
                group["responses"] = torch.full((params.n, 1), 7)
                group["response_mask"] = torch.ones((params.n, 1), dtype=torch.long)
                group["rollout_log_probs"] = torch.zeros((params.n, 1))
                group.meta.update(pad_token_id=0, generated=(0.0, 1.0))
                self.pending.append(group)
        return Completed(None, 0.0, 0.0)

    def streamed(self, wait: bool) -> list[Batch]:
        if not wait or not self.pending:
            return []
        first = min(self.pending, key=self.order)
        self.pending.remove(first)
        return [first]

    def order(self, group: Batch) -> tuple:
        """The finishing order: every draw's row 1 before any row 0, earlier draws first."""
        draw, row = place(group["uid"][0])
        return row == 0, draw


def streamed_pipeline(policy: str, done: set[str] = frozenset(), version: int = 0, drawn: int = 0,
                      rollout: StreamingRollout | None = None, total_steps: int = 4) -> RolloutPipeline:
    """fully_async K=1, 2 prompts a batch, ``total_steps`` steps, streaming with ``policy`` (over ``rollout``, by
    default a :class:`StreamingRollout`); resumed: at ``version``, after ``drawn`` batches, with the uids
    ``done``."""
    draws = [drawn]

    def draw() -> Batch:
        draws[0] += 1
        return Batch({"prompts": torch.ones((ROWS, 1), dtype=torch.long)},
                     {"uid": [f"draw{draws[0]}-{i}" for i in range(ROWS)]})

    rollout = rollout or StreamingRollout()
    pipeline = RolloutPipeline(FULLY_ASYNC, rollout, draw, lambda: ({"offset": draws[0]}, draws[0]), SamplingParams(),
                               seed=7, total_steps=total_steps, max_staleness=1, version=version,
                               buffer=GroupBuffer(ROWS, 1, policy, done=set(done)))
    rollout.pipeline = pipeline
    return pipeline


def run_streamed(pipeline: RolloutPipeline, first: int, last: int) -> list[tuple[list[str], list[int]]]:
    """Steps ``first`` to ``last`` as the trainer drives them: (uids trained, one per group; their versions)."""
    trained = []
    for step in range(first, last + 1):
        prompts = pipeline.prompts(step)
        job = pipeline.take(step, prompts, N, None, "gen")
        batch = pipeline.wait(job)
        assert list(batch["uid"]) == [uid for uid in prompts["uid"] for _ in range(N)]
        trained.append((list(prompts["uid"]), job.oldest[::N].tolist()))
        pipeline.synced(step)
    return trained


def test_a_streamed_step_takes_the_first_finished_groups_and_drops_the_stale():
    """Row 1 of every draw finishes before any row 0 (K=1, 2 prompts a batch). Step 1 trains its own draw (it
    teaches the call) while draw 2 is generated; step 2 the two groups that finished first, draw2-1 (version
    0) and draw3-1 (admitted after sync 1); step 3 (trainer at version 2) gets draw4-1, then draw2-0, which is
    2 versions old: dropped, its place given to draw5-0; then draw3-0 (version 1) arrives; step 4 (version 3,
    room for no more: 8 groups in all) takes draw4-0 and draw5-0."""
    pipeline = streamed_pipeline(DROP)
    trained = run_streamed(pipeline, 1, 4)
    assert trained == [(["draw1-0", "draw1-1"], [0, 0]), (["draw2-1", "draw3-1"], [0, 1]),
                       (["draw3-0", "draw4-1"], [1, 2]), (["draw4-0", "draw5-0"], [2, 2])]
    assert all(step - 1 - version <= 1 for step, (_, versions) in enumerate(trained, 1) for version in versions)
    assert pipeline.buffer.dropped == 1 and pipeline.buffer.regenerated == 0
    # AReaL's bound, in groups: admitted - dropped <= (K + version + 1) x batch = 4, 4, 6, 8, 8 at each job;
    # admitted: 2, 4, 6, 8, then 9 with 1 dropped
    assert [(uids, version) for uids, version, _ in pipeline.rollout.calls] == [
        (["draw1-0", "draw1-1"], 0), (["draw2-0", "draw2-1"], 0), (["draw3-0", "draw3-1"], 1),
        (["draw4-0", "draw4-1"], 2), (["draw5-0"], 2)]
    # the checkpoint: the data position after draw 4 (draw5-1, drawn, was never needed), and the prompts done
    # after it
    assert pipeline.trained_position == ({"offset": 4}, 4)
    assert pipeline.stream_record() == ["draw5-0"]


def test_a_stale_group_regenerated_is_generated_again_by_the_current_weights():
    """As above with ``regenerate``: at step 3 draw2-0 (version 0) is submitted again, by version 2, with a
    seed of its own; it finishes first (the fake's order) and is trained with draw4-1."""
    pipeline = streamed_pipeline(REGENERATE)
    trained = run_streamed(pipeline, 1, 3)
    assert pipeline.buffer.regenerated == 1 and pipeline.buffer.dropped == 0
    again = [call for call in pipeline.rollout.calls if "draw2-0" in call[0]]
    assert [(uids, version) for uids, version, _ in again] == [(["draw2-0", "draw2-1"], 0), (["draw2-0"], 2)]
    assert again[1][2] == derive_seed(7, 2, "regenerate", 1) != again[0][2]
    assert trained[2] == (["draw2-0", "draw4-1"], [2, 2])


class SlowAgain(StreamingRollout):
    """A prompt submitted again finishes after every other group."""

    def order(self, group: Batch) -> tuple:
        again = sum(group["uid"][0] in uids for uids, _, _ in self.calls) > 1
        return again, *super().order(group)


def test_a_regenerated_group_stale_again_is_dropped_not_regenerated_again():
    """As above over 6 steps, the regenerated draw2-0 (version 2) finishing last: at step 5 (version 4) it is
    stale again, so it is dropped (done, never trained) and draw7-0 takes its slot; no third generation."""
    pipeline = streamed_pipeline(REGENERATE, rollout=SlowAgain(), total_steps=6)
    trained = run_streamed(pipeline, 1, 6)
    calls = pipeline.rollout.calls
    assert [(uids, version) for uids, version, _ in calls if "draw2-0" in uids] == [(["draw2-0", "draw2-1"], 0),
                                                                                   (["draw2-0"], 2)]
    assert (pipeline.buffer.regenerated, pipeline.buffer.dropped) == (1, 1)
    assert trained[5] == (["draw6-0", "draw7-0"], [4, 5])
    assert pipeline.trained_position == ({"offset": 6}, 6) and pipeline.stream_record() == ["draw7-0"]  # all done
    assert not any("draw2-0" in uids for uids, _ in trained[1:])
    assert all(step - 1 - version <= 1 for step, (_, versions) in enumerate(trained, 1) for version in versions)


class Withdrawing(StreamingRollout):
    """Each group counts one response withdrawn, resumed (its row + 1) times, as a partial streamed call does."""

    def submit_call(self, method: str, args: tuple, kwargs: dict) -> Completed:
        submitted = super().submit_call(method, args, kwargs)
        for group in self.pending:
            row = place(group["uid"][0])[1]
            group.meta.setdefault("metrics", {"async/interrupted": 1.0, "async/resumed": row + 1.0})
        return submitted


def test_a_streamed_steps_batch_counts_the_withdrawals_of_its_groups():
    """The steps of the dropping run above take draw1-0 and draw1-1, then draw2-1 and draw3-1, then draw3-0 and
    draw4-1, then draw4-0 and draw5-0: each step's batch sums its own groups' counts."""
    pipeline = streamed_pipeline(DROP, rollout=Withdrawing())
    counts = []
    for step in range(1, 5):
        batch = pipeline.wait(pipeline.take(step, pipeline.prompts(step), N, None, "gen"))
        counts.append(batch.meta["metrics"])
        pipeline.synced(step)
    assert counts == [{"async/interrupted": 2.0, "async/resumed": resumed} for resumed in (3.0, 4.0, 3.0, 2.0)]


def test_a_resumed_streamed_run_generates_only_the_prompts_not_done():
    """Resumed after step 2 from the position after draw 3, with draw4-1 done: step 3 trains the first two
    prompts not done (draw4-0, draw5-0), each row keeping its index in its draw; draw4-1 is never generated."""
    pipeline = streamed_pipeline(DROP, done={"draw4-1"}, version=2, drawn=3)
    trained = run_streamed(pipeline, 3, 4)
    assert trained[0] == (["draw4-0", "draw5-0"], [2, 2])
    calls = pipeline.rollout.calls
    assert [uids for uids, _, _ in calls][:4] == [["draw4-0"], ["draw5-0"], ["draw5-1"], ["draw6-0"]]
    assert pipeline.rollout.indices[:4] == [[0], [0], [1], [0]]
    assert not any("draw4-1" in uids for uids, _, _ in calls)


def test_the_buffer_takes_the_first_fresh_groups_to_arrive_ordered_by_draw_and_row():
    """K=1, 2 groups a step; step 3 trains at version 2, so a group of version 0 is stale."""
    buffer = GroupBuffer(2, 1, DROP)
    for uid, version in (("draw3-1", 2), ("draw1-0", 0), ("draw2-0", 1), ("draw2-1", 2)):
        buffer.arrive(Group(uid, version, Batch(objects={"uid": [uid]})))
    taken, dropped, again = buffer.take(3)
    assert [group.uid for group in dropped] == ["draw1-0"] and buffer.dropped == 1 and again == []
    assert [group.uid for group in taken] == ["draw2-0", "draw3-1"]  # the first two fresh ones, by (draw, row)
    assert [group.uid for group in buffer.groups] == ["draw2-1"] and buffer.take(3) == (None, [], [])
    assert buffer.first_open(3) == 1 and buffer.done == {"draw1-0", "draw2-0", "draw3-1"}  # draw1-1 not done
    buffer.done |= {"draw1-1"}
    assert buffer.first_open(3) == 2 and buffer.done == {"draw2-0", "draw3-1"}  # draw 1's uids forgotten


def test_a_prompt_is_regenerated_once_then_dropped_when_stale_again():
    """K=1: draw1-0 of version 0 is stale for step 3 (version 2): regenerated; its new group, of version 2, is
    stale again for step 5: dropped, done. draw1-1, stale for step 3 too, is regenerated and then trained: the
    prompts regenerated are forgotten once done."""
    buffer = GroupBuffer(1, 1, REGENERATE)
    for uid in ("draw1-0", "draw1-1"):
        buffer.arrive(Group(uid, 0, Batch(objects={"uid": [uid]})))
    taken, dropped, again = buffer.take(3)
    assert (taken, dropped, [group.uid for group in again]) == (None, [], ["draw1-0", "draw1-1"])
    buffer.arrive(Group("draw1-1", 2, Batch(objects={"uid": ["draw1-1"]})))
    assert [group.uid for group in buffer.take(3)[0]] == ["draw1-1"]
    buffer.arrive(Group("draw1-0", 2, Batch(objects={"uid": ["draw1-0"]})))
    taken, dropped, again = buffer.take(5)
    assert (taken, [group.uid for group in dropped], again) == (None, ["draw1-0"], [])
    assert (buffer.regenerated, buffer.dropped) == (2, 1)
    assert buffer.done == {"draw1-0", "draw1-1"} and buffer.again == set()
