"""The stored layout of megatron checkpoints (rlloom_megatron.checkpoint): each TP rank's box of
the TP-independent global tensor, by hand for the vocabulary and fc1; the boxes that cover a range of
a flattened tensor (the distributed optimizer's share of a parameter); and for every parameter of a
model: the TP shards (rlloom_megatron.convert.shard), cut in ranges as a DP group's optimizer shares
would be, placed at their boxes give the same global tensor at every TP size."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch
from transformers import Qwen2Config, Qwen2ForCausalLM

from rlloom_megatron.checkpoint import ShardLayout, adam_step, boxes, flat_boxes, install_adam_state
from rlloom_megatron.optimizer import AdamHolding
from rlloom_megatron.convert import ModelLayout, hf_to_megatron, is_tensor_parallel, shard


def layout_for(tp: int, tie: bool = False) -> tuple[ModelLayout, dict[str, torch.Tensor]]:
    torch.manual_seed(0)
    config = Qwen2Config(vocab_size=300, hidden_size=16, intermediate_size=24, num_hidden_layers=1,
                         num_attention_heads=4, num_key_value_heads=4, tie_word_embeddings=tie)
    model = Qwen2ForCausalLM(config)
    layout = ModelLayout.from_hf_config(config, tp)
    return layout, hf_to_megatron(model.state_dict(), layout)


def test_vocabulary_boxes_leave_the_padding_out():
    layout, _ = layout_for(4)
    assert layout.padded_vocab == 512  # 300 rows padded to a multiple of 128 x 4: 128 rows per rank
    shape, per_rank = boxes("embedding.word_embeddings.weight", torch.Size([128, 16]), layout, 4)
    assert shape == (300, 16)
    assert per_rank == [((0, 0), (128, 16)), ((128, 0), (128, 16)), ((256, 0), (44, 16)), ((384, 0), (0, 16))]


def test_fc1_is_stored_as_gate_and_up():
    layout, _ = layout_for(2)
    shape, per_rank = boxes("decoder.layers.0.mlp.linear_fc1.weight", torch.Size([24, 16]), layout, 2)
    assert shape == (2, 24, 16)  # [gate; up] of f = 24 rows each; each rank holds 12 of gate and 12 of up
    assert per_rank == [((0, 0, 0), (2, 12, 16)), ((0, 12, 0), (2, 12, 16))]
    shape, per_rank = boxes("decoder.layers.0.self_attention.linear_proj.weight", torch.Size([16, 8]), layout, 2)
    assert shape == (16, 16) and per_rank == [((0, 0), (16, 8)), ((0, 8), (16, 8))]
    shape, per_rank = boxes("decoder.layers.0.input_layernorm.weight", torch.Size([16]), layout, 2)
    assert shape == (16,) and per_rank == [((0,), (16,))] * 2


def test_flat_boxes_by_hand():
    # shape (3, 4): elements 2..9 are row 0's last two, row 1 whole, row 2's first two
    assert flat_boxes((3, 4), 2, 10) == [((0, 2), (1, 2)), ((1, 0), (1, 4)), ((2, 0), (1, 2))]
    assert flat_boxes((3, 4), 4, 12) == [((1, 0), (2, 4))]  # whole rows: one box
    assert flat_boxes((3, 4), 5, 7) == [((1, 1), (1, 2))]  # inside one row
    assert flat_boxes((3, 4), 5, 5) == []
    # shape (2, 3, 4): 7..21 = [0, 1, 3], [0, 2, :], [1, 0:2, :], [1, 2, 0:2]
    assert flat_boxes((2, 3, 4), 7, 22) == [((0, 1, 3), (1, 1, 1)), ((0, 2, 0), (1, 1, 4)), ((1, 0, 0), (1, 2, 4)),
                                            ((1, 2, 0), (1, 1, 2))]


@pytest.mark.parametrize("shape", [(7,), (5, 6), (3, 4, 5)])
def test_flat_boxes_cover_every_range_exactly_in_memory_order(shape):
    rng = np.random.default_rng(0)
    numel = math.prod(shape)
    index = np.arange(numel).reshape(shape)
    for _ in range(50):
        start, stop = sorted(rng.integers(0, numel + 1, size=2))
        covered = []
        for offsets, sizes in flat_boxes(shape, int(start), int(stop)):
            region = index[tuple(slice(o, o + n) for o, n in zip(offsets, sizes))].ravel()
            assert np.array_equal(region, np.arange(region[0], region[0] + region.size))  # contiguous
            covered.extend(region.tolist())
        assert covered == list(range(start, stop))


def rebuild(name: str, tensor: torch.Tensor, layout: ModelLayout, tp: int, cuts: int) -> torch.Tensor:
    """The global tensor that every TP rank's pieces of ``tensor`` write, each rank's slice cut into
    ``cuts`` flat ranges (as ``cuts`` data-parallel optimizer shares); NaN where nothing is written.
    A replicated parameter is written by TP rank 0 (the others offer the same boxes: DCP keeps one)."""
    local_shape = shard(name, tensor, 0, tp).shape
    shape, _ = boxes(name, local_shape, layout, tp)
    target = torch.full(shape, float("nan"))
    for rank in range(tp if is_tensor_parallel(name) else 1):
        flat = shard(name, tensor, rank, tp).reshape(-1)
        edges = np.linspace(0, flat.numel(), cuts + 1).astype(int)
        for start, stop in zip(edges[:-1], edges[1:]):
            for piece in ShardLayout(layout, tp, rank).pieces(name, local_shape, flat[start:stop], int(start)):
                region = target[tuple(slice(o, o + n) for o, n in zip(piece.offsets, piece.sizes))]
                assert region.isnan().all(), (name, rank)  # no element written twice
                region.copy_(piece.tensor)
    return target


@pytest.mark.parametrize("tie", [False, True])
def test_every_tp_size_writes_the_same_global_tensors(tie):
    """Each rank's shard, placed at its boxes, rebuilds one global tensor per parameter, whole or cut
    in flat ranges as the distributed optimizer's shares of it are; TP = 1, 2 and 4 rebuild the same
    ones (so a checkpoint reads back at any TP and DP size), free of vocabulary padding."""
    stored = {}
    for tp in (1, 2, 4):
        layout, full = layout_for(tp, tie)
        rebuilt = {}
        for name, tensor in full.items():
            rebuilt[name] = rebuild(name, tensor, layout, tp, cuts=1)
            assert not rebuilt[name].isnan().any(), (name, tp)  # the boxes cover the global tensor
            assert torch.equal(rebuild(name, tensor, layout, tp, cuts=3), rebuilt[name]), (name, tp)
        stored[tp] = rebuilt
    for tp in (2, 4):
        assert sorted(stored[tp]) == sorted(stored[1])
        for name in stored[1]:
            assert torch.equal(stored[tp][name], stored[1][name]), (name, tp)
    assert stored[1]["embedding.word_embeddings.weight"].shape == (300, 16)


class GroupStepAdam(torch.optim.Optimizer):
    """Keeps its step count per parameter group and its moments per parameter, as TransformerEngine's
    and apex's FusedAdam do (megatron-core's Adam when either is installed); only the bookkeeping."""

    def __init__(self, params):
        super().__init__(params, {})

    def step(self):
        for group in self.param_groups:
            group["step"] = group.get("step", 0) + 1
            for param in group["params"]:
                state = self.state[param]
                state.setdefault("exp_avg", torch.zeros_like(param)).add_(1.0)
                state.setdefault("exp_avg_sq", torch.zeros_like(param)).add_(2.0)


@pytest.mark.parametrize("make", [lambda params: torch.optim.AdamW(params, lr=0.1), GroupStepAdam],
                         ids=["per-parameter step", "per-group step"])
def test_adam_step_is_read_and_restored_where_the_optimizer_keeps_it(make):
    param = torch.nn.Parameter(torch.ones(3))
    optimizer = make([param])
    for _ in range(3):
        param.grad = torch.ones(3)
        optimizer.step()
    holding = AdamHolding(optimizer, param, 0, 3)
    state = optimizer.state[param]
    assert float(adam_step(holding, state)) == 3.0
    fresh = make([param])
    moments = {"exp_avg": state["exp_avg"].clone(), "exp_avg_sq": state["exp_avg_sq"].clone()}
    install_adam_state(AdamHolding(fresh, param, 0, 3), torch.tensor(3.0), moments)
    param.grad = torch.ones(3)
    fresh.step()  # continues from step 3: step 4 for either kind
    assert float(adam_step(AdamHolding(fresh, param, 0, 3), fresh.state[param])) == 4.0
