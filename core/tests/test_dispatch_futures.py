"""Dispatch modes (scatter/gather worked by hand), futures and their overlap, and
StepContext.concurrently with in-process roles."""

from __future__ import annotations

import importlib.metadata
import sys
import textwrap

import pytest
import torch

from rlloom import Batch, RewardResult, SamplingParams, dispatch
from rlloom.controller.dispatch import (
    DataParallelSplit,
    OneToAll,
    RankZero,
    RolloutSplit,
    TokenBalancedSplit,
    balanced_partition,
    declared_mode,
)
from rlloom.controller.futures import Completed, overlap_s, submit
from rlloom.controller.step import Roles, StepContext
from rlloom.plugins.registry import Registry


def rows(n: int) -> Batch:
    return Batch({"x": torch.arange(n)}, batch_size=n)


def pieces(calls) -> list[list[int] | None]:
    return [None if call is None else call.args[0]["x"].tolist() for call in calls]


def test_dp_split_pads_with_the_last_row_and_drops_it_on_the_way_back():
    mode, batch = DataParallelSplit(), rows(5)
    calls = mode.scatter((batch, "extra"), {"k": 1}, 2)
    assert pieces(calls) == [[0, 1, 2], [3, 4, 4]]
    assert all(call.args[1] == "extra" and call.kwargs == {"k": 1} and call.keep_result for call in calls)
    results = [Batch({"y": call.args[0]["x"] * 10}, batch_size=3) for call in calls]
    assert mode.gather(results, (batch,), {})["y"].tolist() == [0, 10, 20, 30, 40]
    assert pieces(mode.scatter((rows(1),), {}, 3)) == [[0], [0], [0]]  # one row feeds three ranks
    assert mode.gather([{"loss": 0.5}, {"loss": 0.5}], (batch,), {}) == {"loss": 0.5}  # non-batch: rank 0


def test_dp_split_uneven_cuts_without_padding_and_refuses_too_few_rows():
    mode = DataParallelSplit(pad=False)
    assert pieces(mode.scatter((rows(5),), {}, 2)) == [[0, 1, 2], [3, 4]]
    with pytest.raises(ValueError, match="a batch of 1 rows cannot feed 2 ranks without padding"):
        mode.scatter((rows(1),), {}, 2)
    with pytest.raises(TypeError, match="needs a Batch as first argument, got list"):
        mode.scatter(([1, 2],), {}, 2)


def test_balanced_partition_is_sorted_greedy():
    # Heaviest first to the lightest group: 8 -> A, 7 -> B, 6 -> B (7 < 8), 5 -> A, 4 -> A? no: A=13, B=13,
    # tie -> fewer items (A has 2, B has 2) -> first, A=17; then 3 -> B=16.
    assert balanced_partition([8, 7, 6, 5, 4, 3], 2) == [[0, 3, 4], [1, 2, 5]]
    assert balanced_partition([1, 1, 1], 3) == [[0], [1], [2]]  # every group gets an item
    assert balanced_partition([100, 1, 1, 1], 2) == [[0], [1, 2, 3]]


def token_rows(prompt_ids: list[int], response_lengths: list[int]) -> Batch:
    """One-token prompts (rows with equal ids share a prompt), responses of the given lengths."""
    width = max(response_lengths)
    return Batch({
        "prompts": torch.tensor(prompt_ids)[:, None],
        "prompt_mask": torch.ones(len(prompt_ids), 1, dtype=torch.long),
        "response_mask": (torch.arange(width) < torch.tensor(response_lengths)[:, None]).long(),
        "x": torch.arange(len(prompt_ids)),
    })


def test_dp_split_tokens_balances_groups_by_tokens_and_restores_the_order():
    mode = TokenBalancedSplit()
    # Groups (runs of one prompt) of 20, 20, 4 and 4 tokens: equal rows would give ranks 40 and 8.
    batch = token_rows([1, 1, 2, 2, 3, 3, 4, 4], [9, 9, 9, 9, 1, 1, 1, 1])
    calls = mode.scatter((batch, "extra"), {}, 2)
    assert [call.args[0]["x"].tolist() for call in calls] == [[0, 1, 4, 5], [2, 3, 6, 7]]  # 24 and 24
    assert all(call.args[1] == "extra" for call in calls)
    results = [Batch({"y": call.args[0]["x"] * 10}) for call in calls]
    assert mode.gather(results, (batch,), {})["y"].tolist() == [0, 10, 20, 30, 40, 50, 60, 70]
    # Fewer groups than ranks: rows are balanced one by one.
    calls = mode.scatter((token_rows([1, 1, 1], [1, 5, 1]),), {}, 2)
    assert [call.args[0]["x"].tolist() for call in calls] == [[1], [0, 2]]
    with pytest.raises(ValueError, match="a batch of 1 rows cannot feed 2 ranks"):
        mode.scatter((token_rows([1], [1]),), {}, 2)
    # No token fields: consecutive pieces as dp_split_uneven.
    assert [call.args[0]["x"].tolist() for call in mode.scatter((rows(5),), {}, 2)] == [[0, 1, 2], [3, 4]]


def test_rollout_split_cuts_prompts_and_tells_each_rank_where_its_prompts_start():
    mode = RolloutSplit()
    calls = mode.scatter((rows(3), SamplingParams(n=2, seed=5, first_prompt=10)), {}, 2)
    assert pieces(calls) == [[0, 1], [2]]
    assert [call.args[1].first_prompt for call in calls] == [10, 12]
    assert all(call.args[1].seed == 5 and call.args[1].n == 2 for call in calls)
    lone = mode.scatter((rows(1), SamplingParams()), {}, 3)  # one prompt: two ranks sit out
    assert pieces(lone) == [[0], None, None] and lone[0].args[1].first_prompt == 0
    outputs = [Batch({"x": torch.tensor([0, 0, 1, 1])}, batch_size=4), None, Batch({"x": torch.tensor([2, 2])},
                                                                                    batch_size=2)]
    assert mode.gather(outputs, (rows(3), SamplingParams()), {})["x"].tolist() == [0, 0, 1, 1, 2, 2]
    with pytest.raises(TypeError, match="both arguments positional"):
        mode.scatter((rows(3),), {"sampling": SamplingParams()}, 2)


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
        assert registry.choices("dispatch_mode") == ["dp_split", "dp_split_rollout", "dp_split_tokens",
                                                     "dp_split_uneven", "last_rank", "one_to_all", "rank_zero"]
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
