"""Weights between Hugging Face Llama/Qwen2 naming and megatron-core ``GPTModel`` (local layer spec),
and their tensor-parallel (TP) shards.

Megatron layout, per decoder layer ``i`` (prefix ``decoder.layers.{i}.``):

- ``self_attention.linear_qkv.weight`` [(nq + 2·nkv)·d, h]: grouped by KV head: for each of the
  nkv query groups, its nq/nkv query heads, then its key head, then its value head (each d rows).
  HF keeps ``q_proj`` [nq·d, h], ``k_proj`` and ``v_proj`` [nkv·d, h] apart. Biases alike (Qwen2).
- ``mlp.linear_fc1.weight`` [2·f, h]: HF's ``gate_proj`` rows, then ``up_proj`` rows.
- ``self_attention.linear_proj.weight`` = ``o_proj``, ``mlp.linear_fc2.weight`` = ``down_proj``,
  ``input_layernorm.weight`` = HF's, ``pre_mlp_layernorm.weight`` = ``post_attention_layernorm``.
- ``embedding.word_embeddings.weight`` and ``output_layer.weight`` (absent when tied) have the
  vocabulary padded with zero rows to :attr:`ModelLayout.padded_vocab` (a multiple of
  ``vocab_multiple · tp``, so that every TP rank holds the same number of rows); the padded
  entries' logits are masked out of every softmax (:mod:`rlloom_megatron.vocab_parallel`).

TP shards (:func:`shard`, inverse :func:`unshard`): column-parallel weights (QKV by whole query
groups, fc1 as the rank's slice of gate and of up, embedding and output rows) split their first
dimension, row-parallel ones (``linear_proj``, ``linear_fc2``) their second; norms are replicated.
Every conversion is a reshape, slice or concatenation: the round trip is exact.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from dataclasses import dataclass

import torch

VOCAB_MULTIPLE = 128  # Megatron-LM's default make-vocab-size-divisible-by


@dataclass(frozen=True)
class ModelLayout:
    """The shapes a conversion needs, read from a Hugging Face config (:meth:`from_hf_config`)."""

    num_layers: int
    hidden: int
    num_heads: int
    num_kv_heads: int
    head_dim: int
    ffn: int
    vocab: int
    padded_vocab: int
    tied: bool
    qkv_bias: bool

    @classmethod
    def from_hf_config(cls, config, tensor_parallel_size: int = 1) -> ModelLayout:
        """Layout of a Llama/Qwen2-style config; a ValueError names what Megatron cannot shard or
        what this conversion does not cover."""
        config = config.get_text_config()
        kind = getattr(config, "model_type", "?")
        if kind not in ("llama", "qwen2", "mistral"):
            raise ValueError(f"train_engine=megatron converts Llama, Qwen2 and Mistral models, not model_type={kind!r}")
        heads, kv_heads = config.num_attention_heads, getattr(config, "num_key_value_heads", None) or config.num_attention_heads
        tp = tensor_parallel_size
        if kv_heads % tp or heads % tp:
            raise ValueError(f"train_engine.tensor_parallel_size={tp} must divide the number of attention heads "
                             f"({heads}) and of key/value heads ({kv_heads}); choose one of "
                             f"{[n for n in range(1, kv_heads + 1) if kv_heads % n == 0 and heads % n == 0]}")
        if getattr(config, "mlp_bias", False) or (kind != "qwen2" and getattr(config, "attention_bias", False)):
            raise ValueError("train_engine=megatron: linear-layer biases other than Qwen2's q/k/v biases "
                             "(mlp_bias, attention_bias) are not converted")
        head_dim = getattr(config, "head_dim", None) or config.hidden_size // heads
        multiple = VOCAB_MULTIPLE * tp
        return cls(
            num_layers=config.num_hidden_layers, hidden=config.hidden_size, num_heads=heads, num_kv_heads=kv_heads,
            head_dim=head_dim, ffn=config.intermediate_size, vocab=config.vocab_size,
            padded_vocab=-(-config.vocab_size // multiple) * multiple,
            tied=bool(getattr(config, "tie_word_embeddings", False)),
            qkv_bias=kind == "qwen2",
        )


# ---------------------------------------------------------------------------------- names
def _hf_layer(i: int) -> str:
    return f"model.layers.{i}."


def _mg_layer(i: int) -> str:
    return f"decoder.layers.{i}."


_RENAMED = {  # megatron suffix -> HF suffix, per layer
    "self_attention.linear_proj.weight": "self_attn.o_proj.weight",
    "mlp.linear_fc2.weight": "mlp.down_proj.weight",
    "input_layernorm.weight": "input_layernorm.weight",
    "pre_mlp_layernorm.weight": "post_attention_layernorm.weight",
}
TE_FUSED_NORMS = {  # TransformerEngine layer spec's name -> the local spec's, per layer
    "self_attention.linear_qkv.layer_norm_weight": "input_layernorm.weight",
    "mlp.linear_fc1.layer_norm_weight": "pre_mlp_layernorm.weight",
}
GATE_UP = "linear_fc1.weight"  # [gate; up]: each TP rank holds its slice of gate and its slice of up
COLUMN_PARALLEL = ("linear_qkv.weight", "linear_qkv.bias", GATE_UP, "word_embeddings.weight",
                   "output_layer.weight")
ROW_PARALLEL = ("linear_proj.weight", "linear_fc2.weight")


def local_spec_name(name: str) -> str:
    """The local layer spec's name of Megatron parameter ``name``: TransformerEngine's spec folds the
    input norm into ``linear_qkv`` and the pre-MLP norm into ``linear_fc1`` (:data:`TE_FUSED_NORMS`);
    the conversions here are written for the local names. Every other name is returned as it is."""
    if name.startswith("decoder.layers."):
        layer, suffix = _split_layer_name(name)
        if suffix in TE_FUSED_NORMS:
            return _mg_layer(layer) + TE_FUSED_NORMS[suffix]
    return name


def is_tensor_parallel(name: str) -> bool:
    """Whether the Megatron parameter ``name`` is split over TP ranks (else it is replicated)."""
    return name.endswith(COLUMN_PARALLEL + ROW_PARALLEL)


def split_dim(name: str) -> int:
    """The dimension a tensor-parallel parameter ``name`` is split along: 1 for the row-parallel
    ``linear_proj``/``linear_fc2`` (their input columns), else 0."""
    return 1 if name.endswith(ROW_PARALLEL) else 0


# ---------------------------------------------------------------------------------- HF -> Megatron
VOCAB_ROWS = ("word_embeddings.weight", "output_layer.weight")


def pad_vocab(weight: torch.Tensor, layout: ModelLayout) -> torch.Tensor:
    """``weight`` [≥ vocab, h] cut to the real vocabulary and padded with zero rows to ``layout.padded_vocab``."""
    weight = weight[: layout.vocab]
    return torch.cat([weight, weight.new_zeros(layout.padded_vocab - layout.vocab, weight.shape[1])])


def _fuse_qkv(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, layout: ModelLayout) -> torch.Tensor:
    groups, per_group, d = layout.num_kv_heads, layout.num_heads // layout.num_kv_heads, layout.head_dim
    tail = q.shape[1:]
    fused = torch.cat([q.reshape(groups, per_group * d, *tail), k.reshape(groups, d, *tail),
                       v.reshape(groups, d, *tail)], dim=1)
    return fused.reshape(groups * (per_group + 2) * d, *tail)


def hf_to_megatron(hf: Mapping[str, torch.Tensor], layout: ModelLayout) -> dict[str, torch.Tensor]:
    """The full (TP = 1) Megatron state of a Hugging Face state dict (``lm_head.weight`` is read
    only when the model is not tied)."""
    out = {"embedding.word_embeddings.weight": pad_vocab(hf["model.embed_tokens.weight"], layout),
           "decoder.final_layernorm.weight": hf["model.norm.weight"]}
    if not layout.tied:
        out["output_layer.weight"] = pad_vocab(hf["lm_head.weight"], layout)
    for i in range(layout.num_layers):
        src, dst = _hf_layer(i), _mg_layer(i)
        attn = src + "self_attn."
        kinds = ("weight", "bias") if layout.qkv_bias else ("weight",)
        for kind in kinds:
            out[f"{dst}self_attention.linear_qkv.{kind}"] = _fuse_qkv(
                hf[f"{attn}q_proj.{kind}"], hf[f"{attn}k_proj.{kind}"], hf[f"{attn}v_proj.{kind}"], layout)
        out[f"{dst}mlp.linear_fc1.weight"] = torch.cat([hf[f"{src}mlp.gate_proj.weight"],
                                                        hf[f"{src}mlp.up_proj.weight"]])
        for mg_suffix, hf_suffix in _RENAMED.items():
            out[dst + mg_suffix] = hf[src + hf_suffix]
    return out


# ---------------------------------------------------------------------------------- Megatron -> HF
def megatron_to_hf(name: str, full: torch.Tensor, layout: ModelLayout) -> Iterator[tuple[str, torch.Tensor]]:
    """The Hugging Face tensors of one full (unsharded) Megatron parameter, vocabulary padding
    dropped (views of ``full`` where possible)."""
    if name == "embedding.word_embeddings.weight":
        yield "model.embed_tokens.weight", full[: layout.vocab]
    elif name == "output_layer.weight":
        yield "lm_head.weight", full[: layout.vocab]
    elif name == "decoder.final_layernorm.weight":
        yield "model.norm.weight", full
    elif name.startswith("value_head."):  # a critic's head keeps the fsdp critic's names
        yield name, full
    else:
        layer, suffix = _split_layer_name(name)
        src = _hf_layer(layer)
        if suffix.startswith("self_attention.linear_qkv."):
            kind = suffix.rsplit(".", 1)[1]
            groups, per_group, d = layout.num_kv_heads, layout.num_heads // layout.num_kv_heads, layout.head_dim
            grouped = full.reshape(groups, (per_group + 2) * d, *full.shape[1:])
            q, k, v = grouped.split([per_group * d, d, d], dim=1)
            for proj, part in (("q_proj", q), ("k_proj", k), ("v_proj", v)):
                yield f"{src}self_attn.{proj}.{kind}", part.reshape(-1, *full.shape[1:])
        elif suffix == "mlp.linear_fc1.weight":
            gate, up = full.chunk(2)
            yield f"{src}mlp.gate_proj.weight", gate
            yield f"{src}mlp.up_proj.weight", up
        elif suffix in _RENAMED:
            yield src + _RENAMED[suffix], full
        else:
            raise KeyError(f"no Hugging Face name for Megatron parameter {name!r}")


def _split_layer_name(name: str) -> tuple[int, str]:
    if not name.startswith("decoder.layers."):
        raise KeyError(f"no Hugging Face name for Megatron parameter {name!r}")
    layer, suffix = name.removeprefix("decoder.layers.").split(".", 1)
    return int(layer), suffix


# ---------------------------------------------------------------------------------- TP shards
def shard(name: str, full: torch.Tensor, rank: int, size: int) -> torch.Tensor:
    """TP rank ``rank``'s part (of ``size``) of the full Megatron parameter ``name`` (a view)."""
    if size == 1 or not is_tensor_parallel(name):
        return full
    if name.endswith(GATE_UP):  # the rank's slice of gate and of up
        return full.reshape(2, size, -1, full.shape[1])[:, rank].reshape(-1, full.shape[1])
    return full.chunk(size, dim=split_dim(name))[rank]


def unshard(name: str, parts: list[torch.Tensor]) -> torch.Tensor:
    """The full Megatron parameter ``name`` from every TP rank's part, in rank order."""
    if len(parts) == 1 or not is_tensor_parallel(name):
        return parts[0]
    if name.endswith(GATE_UP):
        halves = [part.chunk(2) for part in parts]
        return torch.cat([half[0] for half in halves] + [half[1] for half in halves])
    return torch.cat(parts, dim=split_dim(name))
