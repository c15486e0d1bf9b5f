"""HF <-> Megatron weight conversion and TP slicing: exact round trips, the fused layouts checked
against hand-built expectations, and the errors for what cannot be converted or sharded."""

from __future__ import annotations

import pytest
import torch
from transformers import LlamaConfig, Qwen2Config, Qwen2ForCausalLM

from rlloom_megatron.convert import (
    ModelLayout,
    hf_to_megatron,
    is_tensor_parallel,
    local_spec_name,
    megatron_to_hf,
    shard,
    unshard,
)


def qwen2(tie: bool, **fields) -> Qwen2ForCausalLM:
    torch.manual_seed(0)
    config = Qwen2Config(vocab_size=300, hidden_size=64, intermediate_size=96, num_hidden_layers=2,
                         num_attention_heads=8, num_key_value_heads=2, tie_word_embeddings=tie, **fields)
    return Qwen2ForCausalLM(config)


def back_to_hf(megatron: dict[str, torch.Tensor], layout: ModelLayout) -> dict[str, torch.Tensor]:
    return {hf_name: tensor for name, full in megatron.items() for hf_name, tensor in megatron_to_hf(name, full, layout)}


@pytest.mark.parametrize("tie", [False, True])
@pytest.mark.parametrize("tp", [1, 2])
def test_round_trip_through_tp_shards_is_exact(tie, tp):
    model = qwen2(tie)
    layout = ModelLayout.from_hf_config(model.config, tp)
    assert layout.padded_vocab == 128 * tp * -(-300 // (128 * tp))
    hf = model.state_dict()
    full = hf_to_megatron(hf, layout)
    shards = [{name: shard(name, tensor, rank, tp).clone() for name, tensor in full.items()} for rank in range(tp)]
    if tp == 2:
        assert shards[0]["decoder.layers.0.self_attention.linear_qkv.weight"].shape == (6 * 8, 64)  # 1 group: 4q+k+v
        assert shards[0]["decoder.layers.0.self_attention.linear_proj.weight"].shape == (64, 32)
        assert shards[0]["embedding.word_embeddings.weight"].shape == (layout.padded_vocab // 2, 64)
    joined = {name: unshard(name, [s[name] for s in shards]) for name in full}
    restored = back_to_hf(joined, layout)
    expected = {name: t for name, t in hf.items() if not (tie and name == "lm_head.weight")}
    assert sorted(restored) == sorted(expected)
    for name, tensor in expected.items():
        assert torch.equal(restored[name], tensor), name


def te_spec_names(local: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """The parameters as TransformerEngine's layer spec names them, by megatron-core's own map from its
    local spec's names to the TE spec's (``sharded_state_dict_keys_map`` of the local layer spec, which
    megatron-core uses to load one spec's checkpoint into the other)."""
    from megatron.core.models.gpt.gpt_layer_specs import get_gpt_layer_local_spec

    keys_map = get_gpt_layer_local_spec(normalization="RMSNorm").submodules.sharded_state_dict_keys_map
    renamed = {}
    for name, tensor in local.items():
        for local_prefix, te_prefix in keys_map.items():
            name = name.replace(f".{local_prefix}", f".{te_prefix}")
        renamed[name] = tensor
    return renamed


@pytest.mark.parametrize("tp", [1, 2])
def test_transformer_engine_names_convert_through_their_local_names(tp):
    model = qwen2(tie=False)
    layout = ModelLayout.from_hf_config(model.config, tp)
    full = hf_to_megatron(model.state_dict(), layout)
    te = te_spec_names(full)
    assert "decoder.layers.1.self_attention.linear_qkv.layer_norm_weight" in te
    assert "decoder.layers.1.input_layernorm.weight" not in te
    assert {local_spec_name(name) for name in te} == set(full)  # each TE name finds its converted weight
    for name, tensor in te.items():
        assert torch.equal(full[local_spec_name(name)], tensor), name
        if name.endswith("layer_norm_weight"):  # a norm is replicated, though it lives in a TP-split layer
            assert not is_tensor_parallel(name) and shard(name, tensor, tp - 1, tp) is tensor
    restored = back_to_hf({local_spec_name(name): tensor for name, tensor in te.items()}, layout)
    for name, tensor in model.state_dict().items():
        assert torch.equal(restored[name], tensor), name


def test_fused_layouts_follow_megatron():
    """QKV grouped per KV head (its query heads, then k, then v); fc1 = [gate; up]; fc1's TP slice
    is the rank's part of gate followed by its part of up."""
    model = qwen2(tie=False)
    layout = ModelLayout.from_hf_config(model.config, 2)
    hf = model.state_dict()
    full = hf_to_megatron(hf, layout)
    attn, d = "model.layers.1.self_attn.", 8
    qkv = full["decoder.layers.1.self_attention.linear_qkv.weight"]
    q, k, v = hf[attn + "q_proj.weight"], hf[attn + "k_proj.weight"], hf[attn + "v_proj.weight"]
    group1 = qkv[6 * d:]  # second KV group: query heads 4-7, then k head 1, then v head 1
    assert torch.equal(group1[:4 * d], q[4 * d:]) and torch.equal(group1[4 * d:5 * d], k[d:])
    assert torch.equal(group1[5 * d:], v[d:])
    assert torch.equal(full["decoder.layers.1.self_attention.linear_qkv.bias"][6 * d:6 * d + 4 * d],
                       hf[attn + "q_proj.bias"][4 * d:])
    fc1 = full["decoder.layers.1.mlp.linear_fc1.weight"]
    gate, up = hf["model.layers.1.mlp.gate_proj.weight"], hf["model.layers.1.mlp.up_proj.weight"]
    assert torch.equal(shard("decoder.layers.1.mlp.linear_fc1.weight", fc1, 1, 2), torch.cat([gate[48:], up[48:]]))
    padded = full["embedding.word_embeddings.weight"]
    assert padded.shape[0] == 512 and torch.equal(padded[:300], hf["model.embed_tokens.weight"])
    assert not padded[300:].any()


def test_what_cannot_be_converted_or_sharded_is_named():
    with pytest.raises(ValueError, match=r"tensor_parallel_size=4 must divide .* key/value heads \(2\); choose one of \[1, 2\]"):
        ModelLayout.from_hf_config(qwen2(tie=False).config, 4)
    with pytest.raises(ValueError, match="mlp_bias"):
        ModelLayout.from_hf_config(LlamaConfig(hidden_size=64, num_attention_heads=4, mlp_bias=True), 1)
    with pytest.raises(ValueError, match="not model_type='gpt2'"):
        from transformers import GPT2Config

        ModelLayout.from_hf_config(GPT2Config(), 1)
