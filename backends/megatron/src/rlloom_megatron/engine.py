"""``MegatronTrainEngine``: a Hugging Face Llama/Qwen2 checkpoint trained as a megatron-core
``GPTModel`` with tensor parallelism, as actor, frozen reference or critic (value head).

Ranks. The launcher's world is split by megatron-core into tensor-parallel (TP) groups of
``train_engine.tensor_parallel_size`` consecutive ranks; the groups are data-parallel (DP) replicas.
The controller hands every rank its own rows (``dp_split``, as for fsdp); the ranks of a TP group
first gather their rows (``all_gather_object`` in the TP group), all run the same union (each
holding its slice of every layer), and each returns the results of its own rows. So the engine
runs under any launcher that gives it ranks, with the core's dispatch unchanged.

Sequences. Megatron's RoPE reads positions 0, 1, … of the sequence it is given, so each row is
sent *left-aligned*: its real prompt tokens, then its response, then padding (which a causal
model never attends to from earlier positions); response token j of a row with p prompt tokens
is predicted at position p + j - 1, as in the Hugging Face model with left padding and position
ids. Log-probs and entropy come from the vocabulary-split logits without gathering them
(:mod:`rlloom_megatron.vocab_parallel`).

Optimizer. Float32 parameters on every rank's slice, megatron-core's DDP (gradients accumulated in
one float32 buffer and summed over the DP group after the micro-batches) and its AdamW optimizer:
with ``train_engine.use_distributed_optimizer`` (the default) and more than one DP replica
megatron-core's ``DistributedOptimizer``, which keeps AdamW's state for 1/DP of the buffer on each
DP rank (:mod:`rlloom_megatron.optimizer`). The global gradient norm counts each TP-split
parameter's slices once and each replicated parameter once. On CUDA the forward and backward run
under ``torch.autocast`` in ``train_engine.dtype`` (bf16 by default) with float32 master weights; on
CPU (also on a host with a GPU) the engine runs through :mod:`rlloom_megatron.cpu_compat`. A process's
Megatron engines share one device (:func:`rlloom_megatron.parallel.acquire`).
"""

from __future__ import annotations

import contextlib
import glob
import json
import math
import os
from collections.abc import Iterator

import torch
import torch.distributed as dist
from rlloom import Batch, EngineSpec, dispatch
from rlloom.config import ConfigError
from rlloom.protocols import LossFn
from rlloom_enginekit.devices import rank_device, resolve_dtype, role_device
from rlloom_enginekit.dispatch import group_rows
from rlloom_enginekit.packing import micro_batches
from rlloom_enginekit.sequences import TRAIN_INPUT_FIELDS, policy_temperature
from rlloom_enginekit.train_step import train_step
from transformers import AutoConfig

from rlloom_megatron import checkpoint, cpu_compat, parallel
from rlloom_megatron.config import MegatronConfig
from rlloom_megatron.convert import (
    ModelLayout,
    hf_to_megatron,
    is_tensor_parallel,
    local_spec_name,
    megatron_to_hf,
    shard,
    unshard,
)
from rlloom_megatron.host_memory import ParkedStorages
from rlloom_megatron.model import build_critic, build_gpt_model, megatron_notices_silenced
from rlloom_megatron.optimizer import AdamHolding, adam_holdings, build_optimizer
from rlloom_megatron.vocab_parallel import vocab_parallel_log_probs

ROLES = ("actor", "ref", "critic")
TRAINABLE_ROLES = ("actor", "critic")
ENGINE_STATE_FILE = "engine_state.json"
INSTALL = "pip install 'megatron-core>=0.16.1,<0.20' (or the rlloom-megatron distribution, which requires it)"


def import_megatron():
    """megatron-core's ``parallel_state``; an ImportError naming the install command without it."""
    try:
        from megatron.core import parallel_state
    except ImportError as error:
        raise ImportError(f"train_engine=megatron needs megatron-core: {INSTALL}") from error
    return parallel_state


def load_hf_state(path: str) -> dict[str, torch.Tensor]:
    """Every tensor of the ``*.safetensors`` files in the Hugging Face folder ``path`` (CPU)."""
    from safetensors.torch import load_file

    files = sorted(glob.glob(os.path.join(path, "*.safetensors")))
    if not files:
        raise FileNotFoundError(f"train_engine=megatron reads safetensors weights; {path!r} has no *.safetensors file")
    state: dict[str, torch.Tensor] = {}
    for file in files:
        state.update(load_file(file))
    return state


def left_aligned(micro: Batch) -> tuple[torch.Tensor, torch.Tensor]:
    """``(tokens [b, L], prompt_lengths [b])``: each row's real prompt tokens, then its R response
    slots, then padding; L = longest real prompt + R."""
    prompts, responses = micro["prompts"], micro["responses"]
    width = prompts.shape[1] + responses.shape[1]
    lengths = micro["prompt_mask"].sum(dim=1)
    joined = torch.cat([prompts, responses], dim=1)
    shift = prompts.shape[1] - lengths
    index = (torch.arange(width, device=joined.device) + shift[:, None]).clamp(max=width - 1)
    tokens = joined.gather(1, index)
    keep = int(lengths.max()) + responses.shape[1]
    return tokens[:, :keep], lengths


class MegatronTrainEngine:
    """A :class:`~rlloom.protocols.TrainEngine` on megatron-core (see the module docstring).

    ``spec.role == "actor"``: trainable, AdamW + LR schedule (:meth:`MegatronConfig.lr_at`).
    ``spec.role == "ref"``: frozen, no optimizer. ``spec.role == "critic"``: the transformer with
    a zero-initialised ``value_head`` instead of the LM head (:func:`rlloom_megatron.model.build_critic`),
    trained at ``critic_lr``; it serves :meth:`compute_values`.
    """

    def __init__(self, cfg: MegatronConfig, spec: EngineSpec) -> None:
        if spec.role not in ROLES:
            raise ValueError(f"EngineSpec.role {spec.role!r} is not supported by the megatron train engine; "
                             f"choose one of {list(ROLES)}")
        with megatron_notices_silenced():
            parallel_state = import_megatron()
        self.config = cfg
        self.spec = spec
        self.trainable = spec.role in TRAINABLE_ROLES
        self.is_critic = spec.role == "critic"
        if self.trainable:
            self.lr_at(1)  # fail now if the schedule cannot be computed
        self.device = rank_device(role_device(cfg.device, spec.device, "train_engine.device"))
        self.compute_dtype = resolve_dtype(cfg.dtype, self.device, "train_engine.dtype")
        hf_config = AutoConfig.from_pretrained(spec.model_path)
        self.layout = ModelLayout.from_hf_config(hf_config, cfg.tensor_parallel_size)
        self._positions: torch.Tensor | None = None  # set by _run for the output layer's pre-hook
        with megatron_notices_silenced():
            parallel.acquire(self.device, cfg.tensor_parallel_size, spec.seed)  # the CUDA device or the CPU layer
        self._holds_groups = True
        try:
            self.tp_group = parallel_state.get_tensor_model_parallel_group()
            self.tp_rank = parallel_state.get_tensor_model_parallel_rank()
            self.tp_size = cfg.tensor_parallel_size
            self.dp_group = parallel_state.get_data_parallel_group()
            self.dp_size = dist.get_world_size(self.dp_group)
            self._shards = checkpoint.ShardLayout(self.layout, self.tp_size, self.tp_rank)
            build = build_critic if self.is_critic else build_gpt_model
            with megatron_notices_silenced():
                self.model = build(hf_config, self.layout, self.tp_size, cuda=self.device.type == "cuda",
                                   recompute=cfg.gradient_checkpointing and self.trainable)
            self.model.output_layer.register_forward_pre_hook(self._select_response_positions, with_kwargs=True)
            self._load_hf_weights(spec.model_path)
            self.model.to(self.device)
            self.model.requires_grad_(self.trainable)
        except BaseException:
            self.close()
            raise
        self.ddp, self.optimizer = None, None  # megatron-core's DDP wrapper and optimizer (trainable roles)
        if self.trainable:
            self.ddp, self.optimizer = build_optimizer(self.model, cfg, self.lr_at(1),
                                                       sharded=cfg.use_distributed_optimizer and self.dp_size > 1)
        self.step = 0
        self._parked: ParkedStorages | None = None  # what offload() moved to host memory

    @property
    def _adam_holdings(self) -> dict[torch.nn.Parameter, AdamHolding]:
        """Where this rank keeps AdamW state, by parameter (none for a frozen reference)."""
        return adam_holdings(self.optimizer) if self.optimizer is not None else {}

    def _load_hf_weights(self, path: str) -> None:
        """Convert the folder's weights and copy this TP rank's slices into the model (a critic's
        value head keeps its zero initialisation)."""
        full = hf_to_megatron(load_hf_state(path), self.layout)
        with torch.no_grad():
            for name, param in self.model.named_parameters():
                if not name.startswith("value_head."):
                    param.copy_(shard(name, full[local_spec_name(name)], self.tp_rank, self.tp_size))

    # ------------------------------------------------------------------------------ helpers
    @property
    def vocab_start(self) -> int:
        return self.tp_rank * self.layout.padded_vocab // self.tp_size

    def _autocast(self):
        if self.device.type == "cuda" and self.compute_dtype != torch.float32:
            return torch.autocast("cuda", dtype=self.compute_dtype)
        return contextlib.nullcontext()

    def _ready(self) -> None:
        if self._parked is not None:
            self.onload()

    def _tp_union(self, batch: Batch) -> tuple[Batch, int, int]:
        """The rows of every rank of this TP group, in rank order, and where this rank's start and end."""
        return group_rows(batch, self.tp_group, self.tp_size, self.tp_rank)

    def _micro_batches(self, union: Batch, rows: int) -> list[Batch]:
        """The TP group's rows cut into micro-batches of ``rows`` rows, or by
        ``cfg.max_tokens_per_micro_batch`` when set (:func:`rlloom_enginekit.packing.micro_batches`)."""
        return micro_batches(union, rows, self.config.max_tokens_per_micro_batch)

    def reduce_over_dp(self, values: list[float], op: dist.ReduceOp = dist.ReduceOp.SUM) -> list[float]:
        """``values`` reduced with ``op`` over the data-parallel group (one value per TP group)."""
        if self.dp_size == 1:
            return values
        tensor = torch.tensor(values, dtype=torch.float64, device=self.device)
        dist.all_reduce(tensor, op=op, group=self.dp_group)
        return tensor.tolist()

    def _select_response_positions(self, module, args, kwargs):
        """Forward pre-hook of the output layer: keep only the hidden states [s, b, h] at
        ``self._positions`` [b, R] (where each response token is predicted), so the LM head (or the
        critic's stand-in) runs on R positions per row, not on the prompt's."""
        hidden = args[0]
        index = self._positions.t()[..., None].expand(-1, -1, hidden.shape[-1])
        return (hidden.gather(0, index), *args[1:]), kwargs

    def _run(self, micro: Batch) -> torch.Tensor:
        """The model on the left-aligned rows, read where each response token is predicted
        (position p + j - 1 for token j of a row with p prompt tokens): this rank's logits slice
        [b, R, V_r], or the critic's hidden states [b, R, h]."""
        tokens, lengths = left_aligned(micro)
        length = tokens.shape[1]
        positions = torch.arange(length, device=tokens.device).expand_as(tokens)
        causal = torch.ones(length, length, dtype=torch.bool, device=tokens.device).triu(1)[None, None]
        at = lengths[:, None] - 1 + torch.arange(micro["responses"].shape[1], device=tokens.device)
        self._positions = at.clamp(max=length - 1)
        try:
            with self._autocast():
                return self.model(tokens, positions, attention_mask=causal)
        finally:
            self._positions = None

    def _forward(self, micro: Batch, temperature: float, entropy: bool) -> tuple[torch.Tensor, torch.Tensor | None]:
        """Response log-probs [b, R] (and entropy) under softmax(logits / T), 0 on padding."""
        log_probs, entropies = vocab_parallel_log_probs(
            self._run(micro), micro["responses"], self.vocab_start, self.layout.vocab, temperature, self.tp_group,
            entropy)
        keep = micro["response_mask"].bool()
        log_probs = log_probs.masked_fill(~keep, 0.0)
        return log_probs, None if entropies is None else entropies.masked_fill(~keep, 0.0)

    def _values(self, micro: Batch) -> torch.Tensor:
        """Critic values [b, R], 0 on padding: the value head at the hidden state that predicts
        response token t (as the fsdp critic: V_t estimates the return before token t)."""
        hidden = self._run(micro).float()
        head = self.model.value_head
        values = hidden @ head.weight[0] + head.bias
        return values.masked_fill(micro["response_mask"] == 0, 0.0)

    def train_outputs(self, micro: Batch, temperature: float) -> dict[str, torch.Tensor]:
        if self.is_critic:
            return {"values": self._values(micro)}
        log_probs, entropies = self._forward(micro, temperature, self.config.train_entropy)
        return {"log_probs": log_probs} | ({} if entropies is None else {"entropy": entropies})

    def _require_critic(self, method: str, wanted: bool) -> None:
        if self.is_critic != wanted:
            serves = "values (compute_values)" if self.is_critic else "log-probs (compute_log_probs)"
            raise RuntimeError(f"{method}: this megatron engine has role {self.spec.role!r}, which serves {serves}")

    # ------------------------------------------------------------------------------ protocol
    @dispatch("dp_split")
    def compute_log_probs(self, batch: Batch, entropy: bool = False) -> Batch:
        """``log_probs`` [B, R] (and ``entropy``) of the response tokens, no grad, 0 on padding."""
        self._require_critic("compute_log_probs", wanted=False)
        batch.require(*TRAIN_INPUT_FIELDS)
        self._ready()
        temperature = policy_temperature(batch)
        union, start, stop = self._tp_union(batch)
        self.model.eval()
        log_probs, entropies = [], []
        with torch.no_grad():
            for micro in self._micro_batches(union, self.config.log_prob_micro_batch_size or self.config.micro_batch_size):
                micro_log_probs, micro_entropy = self._forward(micro.to(self.device), temperature, entropy)
                log_probs.append(micro_log_probs)
                entropies.append(micro_entropy)
        fields = {"log_probs": torch.cat(log_probs)[start:stop].cpu()}
        if entropy:
            fields["entropy"] = torch.cat(entropies)[start:stop].cpu()
        return Batch(fields, meta=batch.meta, batch_size=len(batch))

    @dispatch("dp_split")
    def compute_values(self, batch: Batch) -> Batch:
        """Critic role only: ``values`` [B, R] float32, no grad, 0 where ``response_mask`` is 0."""
        self._require_critic("compute_values", wanted=True)
        batch.require(*TRAIN_INPUT_FIELDS)
        self._ready()
        union, start, stop = self._tp_union(batch)
        self.model.eval()
        with torch.no_grad():
            rows = self.config.log_prob_micro_batch_size or self.config.micro_batch_size
            values = [self._values(micro.to(self.device)) for micro in self._micro_batches(union, rows)]
        return Batch({"values": torch.cat(values)[start:stop].cpu()}, meta=batch.meta, batch_size=len(batch))

    @dispatch("dp_split_tokens")
    def train_step(self, batch: Batch, loss_fn: LossFn) -> dict[str, float]:
        """One optimizer step on the mini-batch (this rank's rows of it):
        :func:`rlloom_enginekit.train_step.train_step`, which states the step and its metrics, with
        this engine's parts below.

        The TP group runs the union of its ranks' rows in micro-batches of ``cfg.micro_batch_size``
        rows (or ``cfg.max_tokens_per_micro_batch`` tokens), ``stats`` counted over the DP groups;
        ``outputs``: ``log_probs`` and, with ``cfg.train_entropy``, ``entropy`` (a critic's:
        ``values``); ``loss.backward()``. Gradients are summed over the DP group; then megatron-core's
        optimizer: the global gradient norm, clipping to ``cfg.grad_clip``, AdamW at this step's LR.
        """
        return train_step(self, batch, loss_fn)

    # ------------------------------------------------------------------------------ train-step parts
    # (rlloom_enginekit.train_step.TrainParts)
    def prepare_train(self, batch: Batch) -> None:
        if not self.trainable:
            raise RuntimeError(f"train_step: this megatron engine has role {self.spec.role!r}, a frozen reference "
                               f"model without an optimizer; only roles {list(TRAINABLE_ROLES)} train")
        batch.require(*TRAIN_INPUT_FIELDS)
        self._ready()
        self.model.train()
        self.ddp.zero_grad_buffer()
        with megatron_notices_silenced():
            self.optimizer.zero_grad()

    def train_rows(self, batch: Batch) -> Batch:
        return self._tp_union(batch)[0]

    def train_micro_batches(self, rows: Batch) -> tuple[list[tuple[Batch, Batch]], list[Batch]]:
        """Micro-batches on the device, each its own ``inputs``; no padding passes (DDP reduces the
        gradients once, after the last micro-batch)."""
        micros = [micro.to(self.device) for micro in self._micro_batches(rows, self.config.micro_batch_size)]
        return [(micro, micro) for micro in micros], []

    def backward(self, loss: torch.Tensor) -> None:
        loss.backward()

    def lr_at(self, step: int) -> float:
        return self.config.lr_at(step, self.spec.role, self.spec.total_train_steps)

    def extra_sums(self, micros: list[tuple[Batch, Batch]]) -> dict[str, float]:
        return {}

    def extra_metrics(self, result: dict[str, float], started: float) -> dict[str, float]:
        return {}

    def optimizer_step(self, lr: float) -> float:
        """Sum the gradients over the DP group (megatron-core's DDP), then megatron-core's optimizer
        step at ``lr``: the global gradient norm, clipping to ``cfg.grad_clip``, AdamW. Returns the
        norm (before clipping); when it is not finite the update is skipped (weights and AdamW state
        unchanged). The norm is asked for before ``step()``, which computes it again: megatron-core's
        float32 optimizers step on a non-finite norm, and composing ``step()`` from its parts would
        follow internals that differ between 0.16 and 0.19."""
        with megatron_notices_silenced(), cpu_compat.cuda_type_names():
            self.ddp.finish_grad_sync()
            self.optimizer.prepare_grads()
            grad_norm = float(self.optimizer.get_grad_norm())
            if math.isfinite(grad_norm):
                for group in self.optimizer.param_groups:
                    group["lr"] = lr
                self.optimizer.step()
        return grad_norm

    def named_weights(self) -> Iterator[tuple[str, torch.Tensor]]:
        """Full float32 weights in Hugging Face naming, one Megatron parameter at a time: its TP
        slices are gathered on the engine's device (``all_gather`` in the TP group), joined and
        converted; at most one full parameter beyond the rank's own slices is held at once. Tied
        models yield no ``lm_head.weight`` (as ``save_pretrained``); a critic yields no LM head and
        its ``value_head.weight`` [1, h] and ``value_head.bias`` [1] (the fsdp critic's names). Every rank of the TP group
        must consume the iterator together; every rank gets every tensor."""
        self._ready()
        for name, param in self.model.named_parameters():
            local = param.detach().contiguous()
            if self.tp_size > 1 and is_tensor_parallel(name):
                parts = [torch.empty_like(local) for _ in range(self.tp_size)]
                dist.all_gather(parts, local, group=self.tp_group)
                full = unshard(name, parts)
            else:
                full = local
            yield from megatron_to_hf(local_spec_name(name), full, self.layout)

    def save(self, path: str) -> None:
        """Write a DCP checkpoint of every rank's slices and AdamW state (a sharded optimizer's
        replicas each their own share) in a layout independent of the TP size
        (:mod:`rlloom_megatron.checkpoint`), and from rank 0 ``engine_state.json`` (step, role, TP
        size); :meth:`load` reads it at any TP and DP size. Every rank takes part."""
        self._ready()
        os.makedirs(path, exist_ok=True)
        checkpoint.save(path, self.model, self._adam_holdings, self._shards)
        if dist.get_rank() == 0:
            with open(os.path.join(path, ENGINE_STATE_FILE), "w") as handle:
                json.dump({"step": self.step, "role": self.spec.role, "tensor_parallel_size": self.tp_size}, handle)
        dist.barrier()

    def load(self, path: str) -> None:
        """Restore what :meth:`save` wrote, at any TP and DP size: each rank reads its slices and the
        AdamW state of the parameters it updates. A reference may load an actor's weights."""
        state_file = os.path.join(path, ENGINE_STATE_FILE)
        if not os.path.isfile(state_file):
            raise FileNotFoundError(f"{path!r} is not a megatron engine checkpoint: {ENGINE_STATE_FILE} is missing")
        if os.path.isfile(os.path.join(path, "tp0.pt")):
            raise ConfigError(f"{path!r} holds per-rank tp<rank>.pt files, the format of rlloom-megatron before its "
                              f"DCP checkpoints (commit 9b6a6ff); this version reads only DCP checkpoints: resume or "
                              f"export it with the rlloom-megatron that wrote it, or start the run again in a new "
                              f"trainer.run_dir")
        with open(state_file) as handle:
            engine_state = json.load(handle)
        if self.trainable and engine_state["role"] != self.spec.role:
            raise ValueError(f"{path!r} was saved by an engine with role {engine_state['role']!r}; an engine with "
                             f"role {self.spec.role!r} can only resume from a {self.spec.role!r} checkpoint")
        self._ready()
        checkpoint.load(path, self.model, self._adam_holdings, self._shards)
        self.step = int(engine_state["step"])

    def offload(self) -> None:
        """Free the engine's GPU memory: parameters and AdamW state copied to host memory, the DDP
        gradient buffers dropped (zero when they come back); every view into them stays valid
        (:class:`rlloom_megatron.host_memory.ParkedStorages`). No-op on CPU."""
        if self.device.type == "cpu" or self._parked is not None:
            return
        states = [value for holding in self._adam_holdings.values()
                  for value in holding.optimizer.state.get(holding.key, {}).values()]
        grads = [buffer.grad_data for buffer in self.ddp.buffers] if self.ddp is not None else []
        self._parked = ParkedStorages(kept=[*self.model.parameters(), *states], dropped=grads)
        torch.cuda.empty_cache()

    def onload(self) -> None:
        """Undo :meth:`offload`."""
        if self._parked is None:
            return
        self._parked.restore()
        self._parked = None

    def close(self) -> None:
        """Drop the model and optimizer and release Megatron's groups. Calling it again does nothing."""
        if not getattr(self, "_holds_groups", False):
            return
        self.model = None
        self.ddp, self.optimizer = None, None
        self._holds_groups = False
        parallel.release()
