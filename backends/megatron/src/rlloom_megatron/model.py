"""megatron-core ``GPTModel`` built from a Hugging Face Llama/Qwen2 config.

The model is RMSNorm + SwiGLU + RoPE (non-interleaved halves, as Hugging Face) + grouped-query
attention, without biases except Qwen2's q/k/v ones, with the input embedding shared as LM head
when the config ties them. It uses megatron-core's local layer spec, or TransformerEngine's when
megatron-core can use ``transformer_engine`` and the model is on CUDA (that spec folds each layer's two
norms into the next linear layer: :data:`rlloom_megatron.convert.TE_FUSED_NORMS`). The final norm is
always torch's RMSNorm (``WrappedTorchNorm``), whatever megatron-core would pick from the installed
extensions (apex's fused LayerNorm refuses RMSNorm; TE's would change the numerics). Fusions that need CUDA kernels
(bias-dropout, masked softmax, RoPE, gradient-accumulation) are off; dropout is off (RL
checkpoints have none, and the policy must be the same in train and eval mode).
``calculate_per_token_loss`` makes megatron-core's DDP sum gradients over data-parallel ranks rather
than average them (the engine's losses are each micro-batch's share of the mini-batch loss).
"""

from __future__ import annotations

import contextlib
import importlib.util
import logging
import re
import warnings
from collections.abc import Iterator

import torch
import torch.nn.functional as F
from torch import nn

from rlloom_megatron.convert import ModelLayout, is_tensor_parallel, local_spec_name, split_dim


# What megatron-core prints while it is imported, a model is built and its DDP and optimizer run,
# none of it about this engine's run: it falls back from TransformerEngine / apex kernels the engine
# does not ask for (the layer spec and the norms are chosen here), one of its own TransformerConfig
# defaults is deprecated, an experimental config class of 0.19 announces itself on import, torch
# deprecates the collectives its DDP and distributed optimizer call, and its optimizer's zero_grad
# reads .grad of the parameter shards (views, which torch warns about).
MEGATRON_NOTICES = ("Transformer Engine and Apex are not installed", "Apex is not installed",
                    "full scope is deprecated", "MimoModelConfig is experimental",
                    "`torch.distributed.reduce_scatter_tensor` is deprecated",
                    "`torch.distributed.all_gather_into_tensor` is deprecated",
                    "The .grad attribute of a Tensor that is not a leaf Tensor is being accessed")
# The same kind of notice logged (not warned) by megatron-core 0.19, by logger: GPTModel is deprecated in
# favour of its HybridModel (0.19 still builds GPTModel as before), and its DDP computes the
# distributed optimizer's layout itself when not handed one (what 0.16 always did).
MEGATRON_LOG_NOTICES = {"megatron.core.models.gpt.gpt_model": "GPTModel IS DEPRECATED",
                        "megatron.core.distributed.distributed_data_parallel": "full_param_layout not provided"}


class _DropNotice(logging.Filter):
    def __init__(self, text: str) -> None:
        super().__init__()
        self.text = text

    def filter(self, record: logging.LogRecord) -> bool:
        return self.text not in record.getMessage()


@contextlib.contextmanager
def megatron_notices_silenced() -> Iterator[None]:
    """Inside the block, :data:`MEGATRON_NOTICES` and :data:`MEGATRON_LOG_NOTICES` are not printed;
    every other warning and log record is."""
    filters = [(logging.getLogger(name), _DropNotice(text)) for name, text in MEGATRON_LOG_NOTICES.items()]
    with warnings.catch_warnings():
        for notice in MEGATRON_NOTICES:
            warnings.filterwarnings("ignore", message=re.escape(notice))
        for logger, notice_filter in filters:
            logger.addFilter(notice_filter)
        try:
            yield
        finally:
            for logger, notice_filter in filters:
                logger.removeFilter(notice_filter)


def rope_base(config) -> float:
    """RoPE's base θ; a ValueError for scaled RoPE variants, which are not converted."""
    config = config.get_text_config()
    params = getattr(config, "rope_parameters", None) or {}
    kind = params.get("rope_type", "default") if isinstance(params, dict) else "default"
    if kind != "default":
        raise ValueError(f"train_engine=megatron: RoPE scaling rope_type={kind!r} is not supported (only 'default')")
    theta = params.get("rope_theta") if isinstance(params, dict) else None
    return float(theta or getattr(config, "rope_theta", 10000.0))


def uses_transformer_engine() -> bool:
    """Whether megatron-core can build TransformerEngine layers here: ``transformer_engine`` is
    installed and megatron-core's own import of it succeeded (``HAVE_TE``)."""
    if importlib.util.find_spec("transformer_engine") is None:
        return False
    from megatron.core.extensions import transformer_engine as te_extension

    return bool(te_extension.HAVE_TE)


def build_gpt_model(hf_config, layout: ModelLayout, tensor_parallel_size: int, cuda: bool = False,
                    recompute: bool = False):
    """A ``GPTModel`` with ``layout``'s shapes, its parameters float32 on the CPU and uninitialised
    (the engine loads converted weights into them and moves the model to its device). ``cuda``:
    the model will run on a GPU (TransformerEngine's layer spec when it is installed). ``recompute``:
    keep only each layer's input in the forward and run the layer again in backward (megatron-core's
    full recompute, one layer at a time: ``recompute_granularity="full"``, ``recompute_method="uniform"``,
    ``recompute_num_layers=1``)."""
    from megatron.core.models.gpt.gpt_layer_specs import get_gpt_layer_local_spec
    from megatron.core.models.gpt.gpt_model import GPTModel
    from megatron.core.transformer.torch_norm import WrappedTorchNorm
    from megatron.core.transformer.transformer_block import TransformerBlockSubmodules
    from megatron.core.transformer.transformer_config import TransformerConfig

    text = hf_config.get_text_config()
    config = TransformerConfig(
        num_layers=layout.num_layers, hidden_size=layout.hidden, num_attention_heads=layout.num_heads,
        num_query_groups=layout.num_kv_heads, kv_channels=layout.head_dim, ffn_hidden_size=layout.ffn,
        normalization="RMSNorm", layernorm_epsilon=text.rms_norm_eps, gated_linear_unit=True,
        activation_func=F.silu, add_bias_linear=False, add_qkv_bias=layout.qkv_bias,
        hidden_dropout=0.0, attention_dropout=0.0, tensor_model_parallel_size=tensor_parallel_size,
        params_dtype=torch.float32,
        use_cpu_initialization=True, perform_initialization=False, bias_dropout_fusion=False,
        masked_softmax_fusion=False, persist_layer_norm=False, bias_activation_fusion=False,
        apply_rope_fusion=False, gradient_accumulation_fusion=False, calculate_per_token_loss=True,
        **(dict(recompute_granularity="full", recompute_method="uniform", recompute_num_layers=1) if recompute else {}),
    )
    if cuda and uses_transformer_engine():
        from megatron.core.models.gpt.gpt_layer_specs import get_gpt_layer_with_transformer_engine_spec

        spec = get_gpt_layer_with_transformer_engine_spec()
    else:
        spec = get_gpt_layer_local_spec(normalization="RMSNorm")
    block = TransformerBlockSubmodules(layer_specs=[spec] * layout.num_layers, layer_norm=WrappedTorchNorm)
    model = GPTModel(
        config, block, vocab_size=layout.padded_vocab, max_sequence_length=text.max_position_embeddings,
        position_embedding_type="rope", rotary_base=rope_base(hf_config),
        share_embeddings_and_output_weights=layout.tied, parallel_output=True,
    )
    mark_tensor_parallel(model)
    return model


def mark_tensor_parallel(model: nn.Module) -> None:
    """Give each split parameter megatron-core's tensor-parallel attributes (``tensor_model_parallel``,
    ``partition_dim``: :func:`~rlloom_megatron.convert.split_dim`; ``partition_stride`` 1) where it has
    none. megatron-core sets them only while initialising weights, which :func:`build_gpt_model` skips
    (the engine loads converted ones), and its optimizer needs them: the gradient norm counts a
    parameter without them once per TP group (from TP rank 0), as a replicated one."""
    from megatron.core.tensor_parallel.layers import set_tensor_model_parallel_attributes

    for name, param in model.named_parameters():
        name = local_spec_name(name)
        if is_tensor_parallel(name) and not hasattr(param, "tensor_model_parallel"):
            set_tensor_model_parallel_attributes(param, True, split_dim(name), 1)


class _HiddenStates(nn.Module):
    """Stands in for ``GPTModel.output_layer`` in a value model: it returns the final hidden states
    (after the final norm) unchanged, so ``GPTModel.forward`` yields them [b, s, h] where it would
    yield logits."""

    def forward(self, hidden: torch.Tensor, weight=None, runtime_gather_output=None):
        return hidden, None


def build_critic(hf_config, layout: ModelLayout, tensor_parallel_size: int, cuda: bool = False,
                 recompute: bool = False):
    """:func:`build_gpt_model` as a value model: no LM head (:class:`_HiddenStates` in its place)
    and ``value_head``, a ``Linear(hidden, 1)`` replicated on every TP rank and initialised to zero
    (as the fsdp critic: the first values are 0, every rank starts from the same head)."""
    model = build_gpt_model(hf_config, layout, tensor_parallel_size, cuda, recompute)
    model.output_layer = _HiddenStates()
    model.value_head = nn.Linear(layout.hidden, 1, dtype=torch.float32)
    nn.init.zeros_(model.value_head.weight)
    nn.init.zeros_(model.value_head.bias)
    return model
