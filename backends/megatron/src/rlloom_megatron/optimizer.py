"""megatron-core's data-parallel wrapper and optimizer around a Megatron engine's model, and where
the optimizer keeps each parameter's AdamW state.

Gradients. megatron-core's ``DistributedDataParallel`` (DDP) accumulates every parameter's gradient,
over the micro-batches, into one contiguous float32 buffer (``param.main_grad`` is a view of it);
``finish_grad_sync`` then sums the buffer over the data-parallel (DP) group: an all-reduce, or with
the distributed optimizer a reduce-scatter, after which each DP rank holds the sum for its own
contiguous share of the buffer. Gradients are summed, not averaged over the DP ranks
(``TransformerConfig.calculate_per_token_loss``, set by :func:`rlloom_megatron.model.build_gpt_model`):
each micro-batch loss is already its share of the whole mini-batch's loss.

Optimizer. megatron-core's ``get_megatron_optimizer`` with Adam, which is AdamW (decoupled weight
decay) on every parameter — norms and biases included, as the fsdp engine; megatron-core's default
exemption of them is turned off (``config_overrides={}``). It computes the global gradient norm
(each TP-split parameter's slices and each replicated parameter counted once) and clips to
``clip_grad``. With ``use_distributed_optimizer`` it is megatron-core's ``DistributedOptimizer``: each
DP rank keeps AdamW's moments only for its share of the buffer (a contiguous range of elements,
which may start or end inside a parameter), updates those elements, and the parameters are
all-gathered into every rank's parameter buffer (ZeRO stage 1: optimizer state per rank shrinks
by the DP size). Without it every rank holds the whole state (megatron-core's ``FP32Optimizer``).
Parameters are float32 either way (the engine computes in bf16 under autocast on CUDA).

Building and stepping the optimizer runs inside :func:`rlloom_megatron.cpu_compat.cuda_type_names`
(an empty block on CUDA): megatron-core checks that parameters are CUDA tensors by type name.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from rlloom_megatron import cpu_compat
from rlloom_megatron.model import megatron_notices_silenced


@dataclass(frozen=True)
class AdamHolding:
    """Where this rank's AdamW state for one model parameter lives: ``optimizer.state[key]`` (a
    torch optimizer's state, ``step``, ``exp_avg``, ``exp_avg_sq`` shaped like ``key``), covering
    elements ``[start, stop)`` of the parameter flattened (its local TP slice)."""

    optimizer: torch.optim.Optimizer
    key: torch.Tensor
    start: int
    stop: int


def build_optimizer(model: torch.nn.Module, cfg, lr: float, sharded: bool):
    """``(ddp, optimizer)``: megatron-core's DDP around ``model`` and its AdamW optimizer at ``lr``
    with ``cfg``'s betas, eps, weight decay and gradient clipping (``cfg.grad_clip`` 0: none),
    state sharded over the DP group when ``sharded`` (see the module docstring)."""
    from megatron.core.distributed import DistributedDataParallel, DistributedDataParallelConfig
    from megatron.core.optimizer import OptimizerConfig, get_megatron_optimizer

    config = OptimizerConfig(optimizer="adam", lr=lr, weight_decay=cfg.weight_decay, adam_beta1=cfg.betas[0],
                             adam_beta2=cfg.betas[1], adam_eps=cfg.eps, clip_grad=cfg.grad_clip,
                             use_distributed_optimizer=sharded)
    with megatron_notices_silenced(), cpu_compat.cuda_type_names():
        ddp = DistributedDataParallel(model.config, DistributedDataParallelConfig(
            grad_reduce_in_fp32=True, use_distributed_optimizer=sharded), model)
        optimizer = get_megatron_optimizer(config, [ddp], config_overrides={})
    return ddp, optimizer


def adam_holdings(optimizer) -> dict[torch.nn.Parameter, AdamHolding]:
    """For each model parameter whose AdamW state this rank keeps (all of them, or with the
    distributed optimizer those with elements in its share): where that state lives. The engine's
    parameters are float32, so only megatron-core's float32 groups are read (its float16 ones,
    which keep separate float32 main copies, are empty)."""
    from megatron.core.optimizer.distrib_optimizer import DistributedOptimizer

    holdings = {}
    for part in getattr(optimizer, "chained_optimizers", [optimizer]):
        if isinstance(part, DistributedOptimizer):
            for params, shards in zip(part.model_fp32_groups, part.shard_fp32_groups):
                for param, shard in zip(params, shards):
                    share = part._get_model_param_range_map(param)["param"]
                    holdings[param] = AdamHolding(part.optimizer, shard, share.start, share.end)
        else:
            for group in part.optimizer.param_groups:
                for param in group["params"]:
                    holdings[param] = AdamHolding(part.optimizer, param, 0, param.numel())
    return holdings
