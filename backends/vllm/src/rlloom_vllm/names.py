"""Parameter names: the trainer's (Hugging Face checkpoint) names vs. the vLLM model's.

vLLM fuses some projections of Llama/Qwen2-style models into one parameter, and its
``load_weights`` routes each checkpoint tensor to its shard:

==========================================  =========================================
Hugging Face (trainer) name                  vLLM parameter
==========================================  =========================================
``…self_attn.{q,k,v}_proj.{weight,bias}``    ``…self_attn.qkv_proj.{weight,bias}``
``…mlp.{gate,up}_proj.weight``               ``…mlp.gate_up_proj.weight``
``lm_head.weight`` with tied embeddings      none (vLLM reads ``model.embed_tokens.weight``)
anything else                                the same name
==========================================  =========================================

With LoRA slots (``rollout.max_lora_rank > 0``) vLLM wraps each linear layer, whose weight becomes
``…qkv_proj.base_layer.weight``; the engine lists it without ``base_layer`` (what ``load_weights`` routes).

:class:`NameMap` checks a stream of trainer tensors against the engine's parameter names before they
reach vLLM: an unknown name is refused, and a reload that left an engine parameter without any
tensor is reported (vLLM would keep serving stale or half-rebuilt weights for it).
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator

import torch

FUSED_MODULES: dict[str, str] = {
    "q_proj": "qkv_proj",
    "k_proj": "qkv_proj",
    "v_proj": "qkv_proj",
    "gate_proj": "gate_up_proj",
    "up_proj": "gate_up_proj",
}
TIED_HEAD = "lm_head.weight"


def engine_name(hf_name: str) -> str:
    """The vLLM parameter that receives the Hugging Face tensor ``hf_name`` (see the module table):
    the module segment just before the parameter name is renamed by :data:`FUSED_MODULES`."""
    *modules, parameter = hf_name.split(".")
    if modules:
        modules[-1] = FUSED_MODULES.get(modules[-1], modules[-1])
    return ".".join([*modules, parameter])


class NameMap:
    """Checks trainer tensor names against the engine's parameters ``engine_names``."""

    def __init__(self, engine_names: Iterable[str]) -> None:
        self.engine_names = frozenset(engine_names)
        self.tied_head = TIED_HEAD not in self.engine_names

    def stream(self, named_tensors: Iterable[tuple[str, torch.Tensor]], covered: set[str]) -> Iterator[
            tuple[str, torch.Tensor]]:
        """Yield the tensors vLLM must load, in Hugging Face naming (its ``load_weights`` does the
        renaming); record in ``covered`` the engine parameters they feed. ``lm_head.weight`` is
        dropped when the engine ties it to the embeddings. An unknown name raises a ValueError
        before its tensor is passed on."""
        for name, tensor in named_tensors:
            target = engine_name(name)
            if target not in self.engine_names:
                if name == TIED_HEAD and self.tied_head:
                    continue
                raise ValueError(
                    f"update_weights: {name!r} (vLLM name {target!r}) is not a parameter of the vLLM model; "
                    f"it has e.g. {sorted(self.engine_names)[:4]}"
                )
            covered.add(target)
            yield name, tensor

    def missing(self, covered: set[str]) -> list[str]:
        """Engine parameters that no tensor fed, sorted."""
        return sorted(self.engine_names - covered)
