"""The stored layout of megatron checkpoints (rlloom_megatron.checkpoint.boxes): each TP rank's box of
the TP-independent global tensor, by hand for the vocabulary and fc1, and for every parameter of a
model: the TP shards (rlloom_megatron.convert.shard) placed at their boxes give the same global
tensor at every TP size."""

from __future__ import annotations

import pytest
import torch
from transformers import Qwen2Config, Qwen2ForCausalLM

from rlloom_megatron.checkpoint import _stored_view, boxes
from rlloom_megatron.convert import ModelLayout, hf_to_megatron, shard


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


@pytest.mark.parametrize("tie", [False, True])
def test_every_tp_size_writes_the_same_global_tensors(tie):
    """Each rank's shard, placed at its box, rebuilds one global tensor per parameter; TP = 1, 2 and 4
    rebuild the same ones (so a checkpoint reads back at any TP size), free of vocabulary padding."""
    stored = {}
    for tp in (1, 2, 4):
        layout, full = layout_for(tp, tie)
        rebuilt = {}
        for name, tensor in full.items():
            local = shard(name, tensor, 0, tp)
            shape, per_rank = boxes(name, local.shape, layout, tp)
            target = torch.full(shape, float("nan"))
            for rank, (offsets, sizes) in enumerate(per_rank):
                region = tuple(slice(o, o + s) for o, s in zip(offsets, sizes))
                target[region] = _stored_view(name, shard(name, tensor, rank, tp), sizes)
            assert not target.isnan().any(), (name, tp)  # the boxes cover the global tensor
            rebuilt[name] = target
        stored[tp] = rebuilt
    for tp in (2, 4):
        assert sorted(stored[tp]) == sorted(stored[1])
        for name in stored[1]:
            assert torch.equal(stored[tp][name], stored[1][name]), (name, tp)
    assert stored[1]["embedding.word_embeddings.weight"].shape == (300, 16)
