"""The memory a placement needs on each device, from the model's shape (an analytical model: the profile
measures times, not memory; ``perf/max_memory_allocated_gb`` on a GPU would be the check).

For a decoder-only transformer with L layers, hidden size h, MLP size I, H attention and K key/value
heads of size d = h / H, vocabulary V:

    params      = V·h·(1 if tied else 2) + L·(h·(h + 2·K·d) + h·h + 3·h·I + 2·h) + h
                  (embeddings, LM head, per layer q/k/v/o, the gated MLP and two norms, the final norm;
                  biases left out)
    KV cache    = 2·L·K·d·2 bytes per token (keys and values in bf16)

A train engine under FSDP over S ranks (ZeRO-3) holds per device its 1/S of the float32 weights,
gradients and AdamW's two moments (16 bytes a parameter), two layers' bf16 weights gathered at a time
(the current one and the one prefetched), and the activations of one micro-batch's tokens, 1/SP of
them with sequence parallelism: 34·h bytes per token and layer (Korthikanti et al. 2022, "Reducing
Activation Recomputation in Large Transformer Models": bf16, the attention scores not stored, as
SDPA's memory-efficient and flash kernels do not), or 2·h with gradient checkpointing (each layer's
input only), plus the chunked LM head's 64 MiB of float32 logits twice (logits and probabilities). A
rollout engine with tensor parallelism T holds 2·params / T of bf16 weights and the KV cache of the
tokens it decodes at once, K divided over T.

A packed micro-batch under ``train_engine.attention=sdpa`` also holds its dense ``[k, 1, W, W]`` packing
mask in the compute dtype (b bytes an element), one tensor shared by every layer and kept from forward
to backward; every rank of a sequence-parallel group holds all of it (SP does not divide it):

    mask        = ⌈t / W⌉ · W² · b,  W = min(t, widest pack)

for the t tokens of the micro-batch (a group's, with SP), its packs taken as full (128 MiB for one pack
of 8,192 tokens in bf16, 2 GiB for 32,768). ``attention=varlen`` builds no mask, ``flex`` a block mask of
O(k · (W / 128)²) indices (not counted), the padded layout the model's [b, L] padding mask (not counted).
"""

from __future__ import annotations

import json
import math
import os
from dataclasses import dataclass

HEAD_CHUNK_BYTES = 2 * 64 * 2**20
"""The chunked LM head's float32 logits and probabilities of one chunk (``rlloom_fsdp.head``)."""

NAMED_SHAPES = {
    "qwen2.5-0.5b": {"num_hidden_layers": 24, "hidden_size": 896, "intermediate_size": 4864, "num_attention_heads": 14,
                     "num_key_value_heads": 2, "vocab_size": 151936, "tie_word_embeddings": True},
    "qwen2.5-7b": {"num_hidden_layers": 28, "hidden_size": 3584, "intermediate_size": 18944, "num_attention_heads": 28,
                   "num_key_value_heads": 4, "vocab_size": 152064, "tie_word_embeddings": False},
}
"""The sizes in Qwen/Qwen2.5-0.5B-Instruct's and Qwen/Qwen2.5-7B-Instruct's ``config.json``."""


@dataclass(frozen=True)
class ModelShape:
    """A decoder-only transformer's sizes, under Hugging Face's config names in :meth:`from_config`."""

    layers: int
    hidden: int
    intermediate: int
    heads: int
    kv_heads: int
    vocab: int
    tied: bool

    @classmethod
    def from_config(cls, config: dict) -> ModelShape:
        """From a model folder's ``config.json`` (its ``text_config`` when it has one)."""
        text = config.get("text_config") or config
        return cls(text["num_hidden_layers"], text["hidden_size"], text["intermediate_size"],
                   text["num_attention_heads"], text.get("num_key_value_heads", text["num_attention_heads"]),
                   text["vocab_size"], bool(config.get("tie_word_embeddings", False)))

    @classmethod
    def from_folder(cls, folder: str) -> ModelShape:
        """From the ``config.json`` of a Hugging Face model folder."""
        with open(os.path.join(folder, "config.json"), encoding="utf-8") as handle:
            return cls.from_config(json.load(handle))

    @classmethod
    def named(cls, name: str) -> ModelShape:
        """A shape of :data:`NAMED_SHAPES` or a ``config.json`` (or the folder that holds one); a
        ValueError names the known shapes."""
        if name in NAMED_SHAPES:
            return cls.from_config(NAMED_SHAPES[name])
        if os.path.isdir(name):
            return cls.from_folder(name)
        if name.endswith(".json") and os.path.isfile(name):
            with open(name, encoding="utf-8") as handle:
                return cls.from_config(json.load(handle))
        raise ValueError(f"--shape {name}: not a known shape ({', '.join(NAMED_SHAPES)}), a config.json or a model "
                         "folder")

    @property
    def head_dim(self) -> int:
        return self.hidden // self.heads

    def layer_params(self) -> int:
        """q, k, v, o, the gated MLP and two norms of one layer (module docstring)."""
        h, kv = self.hidden, self.kv_heads * self.head_dim
        return h * (h + 2 * kv) + h * h + 3 * h * self.intermediate + 2 * h

    def params(self) -> int:
        """Every parameter (module docstring)."""
        return self.vocab * self.hidden * (1 if self.tied else 2) + self.layers * self.layer_params() + self.hidden

    def kv_bytes_per_token(self) -> int:
        """bf16 keys and values of one token over all layers."""
        return 2 * self.layers * self.kv_heads * self.head_dim * 2


def train_bytes_per_device(shape: ModelShape, shards: int, tokens: int, sequence_parallel: int = 1,
                           checkpointing: bool = False) -> float:
    """One device of an FSDP train engine sharded over ``shards`` ranks running a micro-batch of
    ``tokens`` tokens, ``sequence_parallel`` ranks sharing it (module docstring)."""
    state = 16 * shape.params() / shards
    gathered = 2 * 2 * shape.layer_params()
    per_token_layer = (2 if checkpointing else 34) * shape.hidden
    activations = tokens / sequence_parallel * shape.layers * per_token_layer
    return state + gathered + activations + HEAD_CHUNK_BYTES


def packing_mask_bytes(tokens: float, widest_pack: float, element_bytes: int) -> float:
    """The dense packing mask of a micro-batch of ``tokens`` tokens in packs at most ``widest_pack`` wide,
    ``element_bytes`` an element (0: no mask): ⌈t / W⌉ · W² · b with W = min(t, widest pack) (module
    docstring)."""
    if not element_bytes:
        return 0.0
    width = min(tokens, widest_pack)
    return math.ceil(tokens / width) * width**2 * element_bytes


def rollout_bytes_per_device(shape: ModelShape, tensor_parallel: int, tokens_in_flight: int) -> float:
    """One device of a rollout engine at tensor parallelism ``tensor_parallel`` decoding
    ``tokens_in_flight`` tokens' worth of sequences at once (module docstring)."""
    return (2 * shape.params() + tokens_in_flight * shape.kv_bytes_per_token()) / tensor_parallel
