"""The engine kit's data-parallel dispatch modes, scatter and gather worked by hand, and their registration."""

from __future__ import annotations

import pytest
import torch
from rlloom import Batch, SamplingParams
from rlloom.plugins.registry import Registry
from rlloom_enginekit.dispatch import DataParallelSplit, RolloutSplit, TokenBalancedSplit, balanced_partition


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
    # Each rank's partial-rollout counts: the whole call's are their sums.
    outputs[0].meta["metrics"] = {"async/interrupted": 2.0, "async/resumed": 3.0}
    outputs[2].meta["metrics"] = {"async/interrupted": 1.0, "async/resumed": 1.0}
    assert mode.gather(outputs, (rows(3), SamplingParams()), {}).meta["metrics"] == {"async/interrupted": 3.0,
                                                                                     "async/resumed": 4.0}
    assert outputs[0].meta["metrics"] == {"async/interrupted": 2.0, "async/resumed": 3.0}
    with pytest.raises(TypeError, match="both arguments positional"):
        mode.scatter((rows(3),), {"sampling": SamplingParams()}, 2)


def test_the_kit_registers_the_data_parallel_modes():
    modes = {name: component.distribution for name, component in Registry().components["dispatch_mode"].items()}
    assert {name: modes.get(name) for name in ("dp_split", "dp_split_uneven", "dp_split_tokens", "dp_split_rollout")} \
        == dict.fromkeys(("dp_split", "dp_split_uneven", "dp_split_tokens", "dp_split_rollout"), "rlloom-enginekit")
    assert isinstance(Registry().build("dispatch_mode", "dp_split_uneven"), DataParallelSplit)
