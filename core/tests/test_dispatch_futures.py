"""The core's dispatch modes and their declaration, futures and their overlap, and
StepContext.concurrently with in-process roles."""

from __future__ import annotations

import importlib.metadata
import sys
import textwrap

import pytest
import torch

from rlloom import Batch, RewardResult, SamplingParams, dispatch
from rlloom.controller.dispatch import OneToAll, RankZero, declared_mode
from rlloom.controller.futures import Completed, overlap_s, submit
from rlloom.controller.step import Roles, StepContext
from rlloom.plugins.registry import Registry


def test_one_to_all_keeps_rank_zero_and_rank_zero_runs_alone():
    calls = OneToAll().scatter((1,), {}, 3)
    assert [call.keep_result for call in calls] == [True, False, False]
    assert [call is None for call in RankZero().scatter((1,), {}, 3)] == [False, True, True]
    assert RankZero().gather(["zero", None, None], (1,), {}) == "zero"


def test_declared_modes_win_over_the_defaults_by_name():
    class Engine:
        @dispatch("rank_zero")
        def train_step(self, batch, loss_fn):
            ...

        def compute_log_probs(self, batch):
            ...

        def save(self, path):
            ...

    engine = Engine()
    assert declared_mode(engine, "train_step") == "rank_zero"
    assert declared_mode(engine, "compute_log_probs") == "dp_split"  # DEFAULT_MODES
    assert declared_mode(engine, "save") == "one_to_all"


def test_a_plugin_registers_its_own_dispatch_mode(tmp_path, monkeypatch):
    (tmp_path / "rlloom_test_modes.py").write_text(textwrap.dedent("""
        from rlloom import hookimpl
        from rlloom.controller.dispatch import RankZero

        class LastRank(RankZero):
            def scatter(self, args, kwargs, world_size):
                return [None] * (world_size - 1) + [RankZero().scatter(args, kwargs, 1)[0]]

            def gather(self, results, args, kwargs):
                return results[-1]

        @hookimpl
        def register_dispatch_modes(register):
            register("last_rank", LastRank)
    """))
    monkeypatch.syspath_prepend(str(tmp_path))
    core = importlib.metadata.EntryPoint(name="core", value="rlloom.builtins", group="rlloom")
    plugin = importlib.metadata.EntryPoint(name="modes", value="rlloom_test_modes", group="rlloom")
    try:
        registry = Registry([core, plugin])
        mode = registry.build("dispatch_mode", "last_rank")
        assert [call is None for call in mode.scatter((1,), {}, 3)] == [True, True, False]
        assert registry.choices("dispatch_mode") == ["last_rank", "one_to_all", "rank_zero"]
    finally:
        sys.modules.pop("rlloom_test_modes", None)


def test_overlap_is_summed_length_minus_union():
    assert overlap_s([(0.0, 2.0), (2.0, 3.0)]) == 0.0  # one after another
    assert overlap_s([(0.0, 2.0), (1.0, 3.0)]) == pytest.approx(1.0)  # 4 s of calls in a 3 s union
    assert overlap_s([(0.0, 4.0), (1.0, 2.0), (1.5, 3.0)]) == pytest.approx(2.5)  # 6.5 - 4
    assert overlap_s([]) == 0.0


def test_submit_runs_an_in_process_call_now():
    future = submit([3, 1, 2], "index", 2)
    assert isinstance(future, Completed) and future.result() == 2
    start, end = future.span()
    assert start <= end
    assert submit(len, "__call__", "abc").result() == 3


class Recorder:
    """An in-process role that records the order its methods were called in."""

    def __init__(self, name: str, log: list[str]) -> None:
        self.name, self.log = name, log

    def compute_log_probs(self, batch: Batch, entropy: bool = False) -> Batch:
        self.log.append(f"{self.name}.compute_log_probs")
        fields = {"log_probs": torch.full((len(batch), 2), -1.0)}
        if entropy:
            fields["entropy"] = torch.ones(len(batch), 2)
        return Batch(fields, batch_size=len(batch))

    def __call__(self, batch: Batch) -> RewardResult:
        self.log.append(f"{self.name}.__call__")
        return RewardResult(scores=torch.tensor([1.0, 0.0]))


def test_concurrently_adds_fields_when_the_block_ends_in_submission_order():
    log: list[str] = []
    roles = Roles(rollout=None, actor=Recorder("actor", log), reward_fn=Recorder("reward", log), resharder=None,
                  ref=Recorder("ref", log))
    ctx = StepContext(roles, tokenizer=None, sampling=SamplingParams(), step=0)
    batch = Batch({"response_mask": torch.ones(2, 2, dtype=torch.int64)}, batch_size=2)
    with ctx.concurrently() as run:
        assert run.score(batch) is None  # nothing to read inside the block
        run.ref_log_probs(batch)
        run.old_log_probs(batch)
        assert "scores" not in batch and "ref_log_probs" not in batch  # not before the block ends
        with pytest.raises(RuntimeError, match="do not nest"):
            with ctx.concurrently():
                pass
    with pytest.raises(RuntimeError, match="has ended"):
        run.score(batch)
    assert log == ["reward.__call__", "ref.compute_log_probs", "actor.compute_log_probs"]
    assert batch["scores"].tolist() == [1.0, 0.0]
    assert batch["token_level_scores"].tolist() == [[0.0, 1.0], [0.0, 0.0]]  # the score on the last token
    assert batch["ref_log_probs"].tolist() == batch["old_log_probs"].tolist() == [[-1.0, -1.0]] * 2
    assert ctx.metrics["actor/entropy"] == 1.0
    assert ctx.metrics["perf/concurrent_overlap_s"] == 0.0  # in-process calls run one after another
    stage_time = sum(ctx.metrics[f"timing_s/{stage}"] for stage in ("reward", "ref", "old_log_prob"))
    assert stage_time <= ctx.metrics["timing_s/concurrent"]


def test_a_context_stage_inside_a_concurrently_block_runs_at_once():
    log: list[str] = []
    roles = Roles(rollout=None, actor=Recorder("actor", log), reward_fn=Recorder("reward", log), resharder=None)
    ctx = StepContext(roles, tokenizer=None, sampling=SamplingParams(), step=0)
    batch = Batch({"response_mask": torch.ones(2, 2, dtype=torch.int64)}, batch_size=2)
    with ctx.concurrently() as run:
        run.old_log_probs(batch)
        ctx.score(batch)  # not through `run`: not deferred
        assert batch["scores"].tolist() == [1.0, 0.0] and "old_log_probs" not in batch
    assert batch["old_log_probs"].tolist() == [[-1.0, -1.0]] * 2
