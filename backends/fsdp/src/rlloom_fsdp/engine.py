"""``FSDPTrainEngine``: a causal LM sharded with FSDP2 over the process group, as actor, reference or
critic (the LM's base transformer with a value head).

Data parallelism: with world size N every rank holds one shard of the parameters and gets its own
part of the batch (balanced by tokens for ``train_step``; at world size 1 in float32 the model is
not wrapped at all, see :func:`rlloom_fsdp.model.shard_model`). ``compute_log_probs``,
``compute_values``, ``train_step``, ``named_weights``, ``save`` and ``load`` are collectives: every
rank must call them together. Ranks may hold different numbers of rows: a rank with fewer
micro-batches runs extra forward (and backward) passes on one of its rows whose result is
discarded (zero loss), so that the ranks' FSDP collectives stay in step. With
``train_engine.sequence_parallel_size`` SP > 1 the ranks form groups of SP that share each
micro-batch by its tokens and are the data-parallel replicas (:mod:`rlloom_fsdp.sequence_parallel`).

Devices: the engine runs on ``train_engine.device`` when set, else the run's ``trainer.device``
(:func:`rlloom_enginekit.devices.role_device`); on CUDA each rank uses the GPU of its ``LOCAL_RANK`` (the
launcher's; Ray gives each worker one visible GPU) and the group's CUDA backend is NCCL. Parameters,
gradients and optimizer state are float32 (master weights); forward and backward run in
``train_engine.dtype`` (``auto``: bfloat16 on CUDA, float32 on CPU) through FSDP2's
``MixedPrecisionPolicy``, with gradients reduced in float32. Batches arrive and results leave on
the CPU.

Model assumptions: a Hugging Face causal LM (``AutoModelForCausalLM``) with ``base_model`` and
output embeddings (the LM head), whose base model's forward accepts ``position_ids`` and a KV
cache, and whose decoder-layer class is listed in ``_no_split_modules`` (see
:func:`rlloom_fsdp.model.decoder_layers`), as transformers' own models do.
"""

from __future__ import annotations

import json
import math
import os
import time
from collections.abc import Iterator

import torch
import torch.distributed as dist
import torch.distributed.checkpoint as dcp
from torch.distributed.checkpoint.state_dict import StateDictOptions, get_state_dict, set_state_dict
from torch.distributed.fsdp import FSDPModule
from torch.distributed.tensor import DTensor
from torch.nn.utils import clip_grads_with_norm_, get_total_norm

from rlloom import Batch, EngineSpec, dispatch
from rlloom.protocols import LossFn
from rlloom_enginekit.devices import move_train_state, rank_device, resolve_dtype, role_device, synchronize
from rlloom_enginekit.dispatch import group_rows
from rlloom_enginekit.packing import micro_batches
from rlloom_enginekit.sequences import TRAIN_INPUT_FIELDS, policy_temperature
from rlloom_enginekit.train_step import train_step
from rlloom_fsdp import process_group
from rlloom_fsdp.attention import use_attention
from rlloom_fsdp.config import FSDPConfig, check_sequence_parallel
from rlloom_fsdp.head import default_chunk_rows
from rlloom_fsdp.lora import adapter_tensors, adapters_off, add_adapters, merged_named_tensors, write_adapter_folder
from rlloom_fsdp.model import full_named_tensors, load_critic, load_model, shard_model
from rlloom_fsdp.perf import mfu, train_flops
from rlloom_fsdp.scoring import ModelInput, attach_scorer, model_input
from rlloom_fsdp.sequence_parallel import SequenceGroups, sequence_groups, use_sequence_parallel

ROLES = ("actor", "ref", "critic")
TRAINABLE_ROLES = ("actor", "critic")
ENGINE_STATE_FILE = "engine_state.json"


class FSDPTrainEngine:
    """A :class:`~rlloom.protocols.TrainEngine` on ``torch.distributed.fsdp.fully_shard``.

    ``spec.role == "actor"``: trainable, AdamW + LR schedule (:func:`rlloom_enginekit.engine_config.lr_factor`) over
    ``spec.total_train_steps`` optimizer steps. ``spec.role == "ref"``: a frozen copy (no optimizer;
    ``train_step`` raises). ``spec.role == "critic"``: a :class:`rlloom_fsdp.model.CriticModel`
    (base transformer + zero-initialised ``Linear(hidden, 1)`` value head) trained like the actor
    but at ``cfg.critic_lr`` (``None``: ``cfg.lr``); it serves :meth:`compute_values`, not
    :meth:`compute_log_probs`. Device and precision: see the module docstring.

    With ``cfg.lora.rank > 0`` the actor carries LoRA adapters (:mod:`rlloom_fsdp.lora`): only they train
    (and are checkpointed, with their optimizer state), :meth:`compute_ref_log_probs` gives the base
    model's log-probs (the reference policy, adapters off) and :meth:`named_weights` the merged weights.
    """

    def __init__(self, cfg: FSDPConfig, spec: EngineSpec) -> None:
        if spec.role not in ROLES:
            raise ValueError(
                f"EngineSpec.role {spec.role!r} is not supported by the fsdp train engine; choose one of "
                f"{list(ROLES)}"
            )
        self.config = cfg
        self.spec = spec
        self.trainable = spec.role in TRAINABLE_ROLES
        self.is_critic = spec.role == "critic"
        self.lora = cfg.lora if spec.role == "actor" and cfg.lora.enabled else None
        if self.trainable:
            # Fail now, not at the first train_step, if the schedule cannot be computed.
            self.lr_at(1)
        self.device = rank_device(role_device(cfg.device, spec.device, "train_engine.device"))
        self.compute_dtype = resolve_dtype(cfg.dtype, self.device, "train_engine.dtype")
        if self.device.type == "cuda":
            torch.cuda.set_device(self.device)
        mesh = process_group.acquire(self.device)
        self._holds_group = True
        self._offloaded = False
        self.sequence: SequenceGroups | None = None
        try:
            self.model = self._load_model()
            base = self.model.base if self.is_critic else self.model
            use_attention(base, cfg.attention, self.device, self.trainable)
            self.sequence = self._sequence_groups(base.config.get_text_config())
            use_sequence_parallel(base, self.sequence)
            self.vocab_size = None if self.is_critic else self.model.config.get_text_config().vocab_size
            head = self.model.value_head if self.is_critic else self.model.get_output_embeddings()
            self.flops_per_token = train_flops(self.model, head)
            shard_model(self.model, mesh, reshard_after_forward=cfg.reshard_after_forward,
                        compute_dtype=self.compute_dtype)
            attach_scorer(self.model, critic=self.is_critic)
        except BaseException:
            self.close()
            raise
        self.optimizer = (
            torch.optim.AdamW(
                [parameter for parameter in self.model.parameters() if parameter.requires_grad],
                lr=self.lr_at(1),
                betas=(cfg.betas[0], cfg.betas[1]),
                eps=cfg.eps,
                weight_decay=cfg.weight_decay,
                # One fused kernel over plain (unsharded) parameters: on CPU the default per-tensor
                # loop took several times as long. Sharded DTensor parameters keep the default.
                fused=not any(isinstance(parameter, DTensor) for parameter in self.model.parameters()) or None,
            )
            if self.trainable
            else None
        )
        self.step = 0  # optimizer steps taken (skipped non-finite updates included)
        self.serves_reference = False  # set by the first compute_ref_log_probs

    # ------------------------------------------------------------------------------ helpers
    def _load_model(self) -> torch.nn.Module:
        """This role's model: a critic, or the causal LM (with LoRA adapters on an actor that has them)."""
        cfg, spec = self.config, self.spec
        if self.is_critic:
            return load_critic(spec.model_path, gradient_checkpointing=cfg.gradient_checkpointing)
        model = load_model(spec.model_path, trainable=self.trainable, gradient_checkpointing=cfg.gradient_checkpointing)
        if self.lora is not None:
            add_adapters(model, self.lora)
        return model

    def _sequence_groups(self, text_config) -> SequenceGroups:
        """The sequence-parallel and data-parallel groups of ``cfg.sequence_parallel_size`` (a
        ValueError naming the key when it does not divide the heads or the world size)."""
        size = self.config.sequence_parallel_size
        check_sequence_parallel(size, text_config.num_attention_heads,
                                getattr(text_config, "num_key_value_heads", None), dist.get_world_size())
        return sequence_groups(size)

    @property
    def dp_size(self) -> int:
        """The data-parallel replicas: every rank, or every sequence-parallel group."""
        return self.sequence.dp_size

    def lr_at(self, step: int) -> float:
        """The learning rate of optimizer step ``step`` (1-based)."""
        return self.config.lr_at(step, self.spec.role, self.spec.total_train_steps)

    def reduce_over_dp(self, values: list[float], op: dist.ReduceOp = dist.ReduceOp.SUM) -> list[float]:
        """``values`` reduced with ``op`` over the data-parallel replicas (a collective of this rank's DP
        group, on the engine's device so that an NCCL-only group serves it too)."""
        tensor = torch.tensor(values, dtype=torch.float64, device=self.device)
        dist.all_reduce(tensor, op=op, group=self.sequence.dp_group)
        return tensor.tolist()

    def _group_rows(self, batch: Batch) -> tuple[Batch, int, int]:
        """The rows of this rank's sequence-parallel group, and where this rank's lie in them
        (:func:`rlloom_enginekit.dispatch.group_rows`)."""
        return group_rows(batch, self.sequence.group, self.sequence.size, self.sequence.rank)

    @staticmethod
    def _check_inputs(batch: Batch, method: str) -> None:
        batch.require(*TRAIN_INPUT_FIELDS)
        if len(batch) == 0:
            raise ValueError(f"{method}: the batch is empty; every rank needs at least one row")

    def _ready(self) -> None:
        """Bring offloaded state back before any work (see :meth:`offload`)."""
        if self._offloaded:
            self.onload()

    def _micro_batches(self, batch: Batch, rows: int) -> tuple[list[tuple[Batch, ModelInput]], list[ModelInput]]:
        """``batch`` cut into micro-batches (:func:`rlloom_enginekit.packing.micro_batches`: ``rows`` rows
        each, or by ``cfg.max_tokens_per_micro_batch`` when set), each on the engine's device with its
        model input (:func:`rlloom_fsdp.scoring.model_input`, laid out on the CPU before any of it is
        copied, so the passes over them never wait for a value read back from the GPU), and the inputs
        of the padding passes this rank must add to match the rank with the most micro-batches (the
        first row, once per missing micro-batch). With sequence parallelism ``batch`` is the group's
        rows and each input this rank's share of the micro-batch's tokens."""
        cut = micro_batches(batch, rows, self.config.max_tokens_per_micro_batch)
        (most,) = self.reduce_over_dp([len(cut)], dist.ReduceOp.MAX)
        layout = self.config.sequence_layout
        micros = [(micro.to(self.device), model_input(micro, layout, self.sequence).to(self.device)) for micro in cut]
        missing = int(most) - len(cut)
        padding = model_input(cut[0].slice(0, 1), layout, self.sequence).to(self.device) if missing else None
        return micros, [padding] * missing

    def _forward(
        self, inputs: ModelInput, temperature: float, entropy: bool
    ) -> tuple[torch.Tensor, torch.Tensor | None]:
        """Response log-probs [b, R] (and entropy [b, R]) under softmax(logits / T), 0 on padding,
        from :func:`rlloom_fsdp.scoring.score_responses`: one forward in ``cfg.sequence_layout``,
        and only real response tokens go through the LM head, in chunks of ``cfg.head_chunk_rows``
        rows (0: :func:`rlloom_fsdp.head.default_chunk_rows`)."""
        return self.model.score_responses(
            inputs, temperature, entropy, self.config.head_chunk_rows or default_chunk_rows(self.vocab_size),
        )

    def _values_forward(self, inputs: ModelInput) -> torch.Tensor:
        """Critic values [b, R], 0 on padding (:func:`rlloom_fsdp.scoring.score_values`): the value
        for response token t is read at the hidden state that predicts token t, aligned like the
        log-probs, so V_t estimates the return from the state *before* token t is emitted."""
        return self.model.score_values(inputs)

    def train_outputs(self, inputs: ModelInput, temperature: float) -> dict[str, torch.Tensor]:
        """What ``train_step`` hands the loss: ``values`` for a critic, else ``log_probs`` (and
        ``entropy`` when ``cfg.train_entropy``), all [b, R] with grad."""
        if self.is_critic:
            return {"values": self._values_forward(inputs)}
        log_probs, entropies = self._forward(inputs, temperature, self.config.train_entropy)
        outputs = {"log_probs": log_probs}
        if entropies is not None:
            outputs["entropy"] = entropies
        return outputs

    def _reshard(self) -> None:
        """Free the parameters a no-grad pass left gathered. FSDP2 keeps the root module's (embeddings,
        final norm, LM or value head) unsharded after its forward, for the backward that follows in
        training — and each decoder layer's too with ``reshard_after_forward=False`` — but a no-grad
        pass has no backward to reshard them: a reference engine would hold them gathered for good."""
        for module in self.model.modules():
            if isinstance(module, FSDPModule):
                module.reshard()

    def _require_trainable(self, method: str) -> None:
        if not self.trainable:
            raise RuntimeError(
                f"{method}: this fsdp engine has role {self.spec.role!r}, a frozen reference model without "
                f"an optimizer; only roles {list(TRAINABLE_ROLES)} train"
            )

    def _require_critic(self, method: str, wanted: bool) -> None:
        """Raise unless this engine is a critic (``wanted``) or is not one (not ``wanted``)."""
        if self.is_critic != wanted:
            serves = "values (compute_values)" if self.is_critic else "log-probs (compute_log_probs)"
            raise RuntimeError(
                f"{method}: this fsdp engine has role {self.spec.role!r}, which serves {serves}; "
                + ("only role 'critic' has a value head" if wanted else "a critic has no LM head")
            )

    # ------------------------------------------------------------------------------ protocol
    @dispatch("dp_split")
    def compute_log_probs(self, batch: Batch, entropy: bool = False) -> Batch:
        """``log_probs`` [B, R] (and ``entropy`` [B, R] when asked) of the response tokens, no grad.

        Policy softmax(logits / T), T = ``batch.meta["temperature"]`` (default 1). Both are 0 where
        ``response_mask`` is 0. Returns a batch with only these fields (and ``batch.meta``); join it
        to the input with ``Batch.union``. The model runs in eval mode (no dropout); afterwards every
        parameter is sharded again (:meth:`_reshard`).
        """
        self._require_critic("compute_log_probs", wanted=False)
        self._check_inputs(batch, "compute_log_probs")
        self._ready()
        temperature = policy_temperature(batch)
        size = self.config.log_prob_micro_batch_size or self.config.micro_batch_size
        rows, start, end = self._group_rows(batch)
        micros, padding = self._micro_batches(rows, size)
        self.model.eval()
        log_probs, entropies = [], []
        with torch.no_grad():
            for _, inputs in micros:
                micro_log_probs, micro_entropy = self._forward(inputs, temperature, entropy)
                log_probs.append(micro_log_probs)
                entropies.append(micro_entropy)
            for inputs in padding:
                self._forward(inputs, temperature, False)
        self._reshard()
        fields = {"log_probs": torch.cat(log_probs)[start:end].cpu()}
        if entropy:
            fields["entropy"] = torch.cat(entropies)[start:end].cpu()
        return Batch(fields, meta=batch.meta, batch_size=len(batch))

    @dispatch("dp_split")
    def compute_ref_log_probs(self, batch: Batch, entropy: bool = False) -> Batch:
        """:meth:`compute_log_probs` of the reference policy this LoRA actor serves: its base model, every
        adapter off (:func:`rlloom_fsdp.lora.adapters_off`). RuntimeError on an engine without LoRA."""
        if self.lora is None:
            raise RuntimeError("compute_ref_log_probs: only an actor with LoRA (train_engine.lora.rank > 0) serves "
                               "the reference policy; this run needs a reference engine")
        self.serves_reference = True
        with adapters_off(self.model):
            return self.compute_log_probs(batch, entropy)

    @dispatch("dp_split")
    def compute_values(self, batch: Batch) -> Batch:
        """Critic role only: ``values`` [B, R] float32, no grad, 0 where ``response_mask`` is 0.

        V_t is the value head at the hidden state that predicts response token t (positions
        P-1 … P+R-2), aligned like log-probs (see :meth:`_values_forward`). Returns a batch with only
        this field (and ``batch.meta``). Micro-batches of ``cfg.log_prob_micro_batch_size`` rows
        (``None``: ``cfg.micro_batch_size``); eval mode; every parameter sharded again afterwards.
        """
        self._require_critic("compute_values", wanted=True)
        self._check_inputs(batch, "compute_values")
        self._ready()
        size = self.config.log_prob_micro_batch_size or self.config.micro_batch_size
        rows, start, end = self._group_rows(batch)
        micros, padding = self._micro_batches(rows, size)
        self.model.eval()
        with torch.no_grad():
            values = [self._values_forward(inputs) for _, inputs in micros]
            for inputs in padding:
                self._values_forward(inputs)
        self._reshard()
        return Batch({"values": torch.cat(values)[start:end].cpu()}, meta=batch.meta, batch_size=len(batch))

    @dispatch("dp_split_tokens")
    def train_step(self, batch: Batch, loss_fn: LossFn) -> dict[str, float]:
        """One AdamW step on the mini-batch ``batch`` (this rank's rows of it):
        :func:`rlloom_enginekit.train_step.train_step`, which states the step and its metrics, with
        this engine's parts below.

        Micro-batches of ``cfg.micro_batch_size`` rows (or ``cfg.max_tokens_per_micro_batch``
        tokens); forward in train mode (dropout as set in the model's config; RL checkpoints
        normally have none, so the policy matches :meth:`compute_log_probs`); ``outputs`` as in
        :meth:`compute_log_probs` (``entropy`` when ``cfg.train_entropy``) or, for a critic,
        :meth:`compute_values`, with grad; backward of ``loss * world_size``: FSDP averages
        gradients over ranks, which the factor undoes. A rank with fewer micro-batches adds padding
        passes. Then the global gradient L2 norm, clipping to ``cfg.grad_clip`` (when > 0), AdamW at
        this step's LR. Besides the kit's metrics: ``perf/model_flops/<role>`` (the step's forward and
        backward FLOPs over all ranks, :mod:`rlloom_fsdp.perf`) and on CUDA ``perf/mfu/<role>``
        (:func:`rlloom_fsdp.perf.mfu` of the step's wall time, when the GPU's peak is known).
        """
        return train_step(self, batch, loss_fn)

    # ------------------------------------------------------------------------------ train-step parts
    # (rlloom_enginekit.train_step.TrainParts)
    def prepare_train(self, batch: Batch) -> None:
        self._require_trainable("train_step")
        self._check_inputs(batch, "train_step")
        self._ready()
        self.model.train()

    def train_rows(self, batch: Batch) -> Batch:
        return self._group_rows(batch)[0]

    def train_micro_batches(self, rows: Batch) -> tuple[list[tuple[Batch, ModelInput]], list[ModelInput]]:
        return self._micro_batches(rows, self.config.micro_batch_size)

    def backward(self, loss: torch.Tensor) -> None:
        (loss * dist.get_world_size()).backward()

    def optimizer_step(self, lr: float) -> float:
        grad_norm = self._clip_gradients()
        if math.isfinite(grad_norm):
            for group in self.optimizer.param_groups:
                group["lr"] = lr
            self.optimizer.step()
        self.optimizer.zero_grad(set_to_none=True)
        return grad_norm

    def extra_sums(self, micros: list[tuple[Batch, ModelInput]]) -> dict[str, float]:
        """``perf/model_flops/<role>``: this rank's forward and backward FLOPs of the step (its group's
        under sequence parallelism)."""
        flops = self.flops_per_token.step(sum(inputs.tokens for _, inputs in micros),
                                          sum(inputs.positions.numel() for _, inputs in micros))
        return {f"perf/model_flops/{self.spec.role}": flops}

    def extra_metrics(self, result: dict[str, float], started: float) -> dict[str, float]:
        """On CUDA ``perf/mfu/<role>``, once the GPU has finished the step's work; once this LoRA actor has
        served the reference policy, ``perf/reference_memory_saved_gb``: the frozen base weights (all ranks'
        shards) that a reference engine would have held."""
        # the frozen (base) weights, whole: a DTensor's numel is its full tensor's
        frozen = sum(p.numel() * p.element_size() for p in self.model.parameters() if not p.requires_grad)
        metrics = {"perf/reference_memory_saved_gb": frozen / 1e9} if self.serves_reference else {}
        if self.device.type != "cuda":
            return metrics
        synchronize(self.device)
        flops = result[f"perf/model_flops/{self.spec.role}"]
        utilisation = mfu(flops, time.perf_counter() - started, self.device, dist.get_world_size())
        return metrics if utilisation is None else {**metrics, f"perf/mfu/{self.spec.role}": utilisation}

    def _clip_gradients(self) -> float:
        """Global L2 norm of all gradients (over every shard); clip them to ``cfg.grad_clip``."""
        parameters = [p for p in self.model.parameters() if p.grad is not None]
        norm = get_total_norm([p.grad for p in parameters], norm_type=2.0)
        if isinstance(norm, DTensor):
            norm = norm.full_tensor()
        if self.config.grad_clip > 0 and torch.isfinite(norm):
            clip_grads_with_norm_(parameters, self.config.grad_clip, norm)
        return float(norm)

    def named_weights(self) -> Iterator[tuple[str, torch.Tensor]]:
        """Full float32 weights on the engine's device (a GPU's stay there: an in-process sync to a
        rollout engine on the same GPU never goes through host memory) under the Hugging Face
        ``state_dict`` names, one tensor at a time.

        With tied embeddings ``lm_head.weight`` is not yielded (it is ``model.embed_tokens.weight``),
        matching ``save_pretrained``. A critic yields its base model's weights (causal-LM names, no
        ``lm_head``) and ``value_head.weight`` [1, hidden], ``value_head.bias`` [1]; ``save`` and
        ``load`` include the head under the same names. All ranks must consume the iterator together; every rank gets
        every full tensor. With LoRA: the merged weights W0 + (alpha / r) · B A under the base model's names
        (:func:`rlloom_fsdp.lora.merged_named_tensors`; the module stays unmerged), no adapter tensor.
        """
        self._ready()
        if self.lora is not None:
            yield from merged_named_tensors(self.model, self.lora.scaling)
        else:
            yield from full_named_tensors(self.model)

    def base_weights(self) -> Iterator[tuple[str, torch.Tensor]]:
        """The frozen base weights W0 as :meth:`named_weights` streams the merged ones (same names, same
        collective; :class:`rlloom_enginekit.lora.SyncsAdapters`). ValueError on an engine without LoRA."""
        if self.lora is None:
            raise ValueError("base_weights: this engine trains no LoRA adapters (train_engine.lora.rank=0)")
        self._ready()
        yield from merged_named_tensors(self.model, 0.0)

    def save_adapter(self, out_dir: str, base_model: str | None = None) -> str:
        """The LoRA adapters as a PEFT folder naming ``base_model`` (default: this engine's model folder;
        :class:`rlloom_enginekit.lora.SavesAdapter`); every rank must call it (gathering is a collective), rank
        0 writes. ValueError on an engine without LoRA."""
        self._write_adapter(out_dir, base_model, dist.get_rank() == 0)
        dist.barrier()
        return out_dir

    def write_adapter(self, out_dir: str) -> str:
        """:meth:`save_adapter` with every rank writing ``out_dir``, a folder of its own (adapter-only sync into
        each rank's rollout engine; :class:`rlloom_enginekit.lora.SyncsAdapters`)."""
        return self._write_adapter(out_dir, None, True)

    def _write_adapter(self, out_dir: str, base_model: str | None, writes: bool) -> str:
        if self.lora is None:
            raise ValueError("save_adapter: this engine trains no LoRA adapters (train_engine.lora.rank=0)")
        self._ready()
        tensors = dict(adapter_tensors(self.model))
        if writes:
            write_adapter_folder(tensors, self.lora, base_model or self.spec.model_path, out_dir)
        return out_dir

    def live_weights(self) -> Iterator[tuple[str, torch.Tensor]]:
        """The model's own parameters (:class:`rlloom.protocols.LendsWeights`; no copy) under the names
        of :meth:`named_weights`. Only an unsharded model (world size 1 in float32, where the engine keeps
        a plain module) has them whole: otherwise a ValueError saying to use another resharder. With LoRA
        no parameter holds the policy's weights W0 + (alpha / r) · B A: a ValueError too."""
        self._ready()
        if self.lora is not None:
            raise ValueError("resharder=shared lends the train engine's own parameters, and with LoRA none holds the "
                             "policy's weights W0 + (alpha/r)·B·A: use resharder=in_process (merged per tensor)")
        seen: set[int] = set()
        for name, tensor in self.model.state_dict(keep_vars=True).items():
            if isinstance(tensor, DTensor):
                raise ValueError("resharder=shared needs the train engine's whole weights in this process; this "
                                 "FSDP engine holds shards (world size > 1 or a non-float32 dtype): use "
                                 "resharder=in_process")
            if id(tensor) not in seen:
                seen.add(id(tensor))
                yield name, tensor.detach()

    def save(self, path: str) -> None:
        """Write a ``torch.distributed.checkpoint`` of the model (and optimizer) shards to ``path`` (with LoRA
        the adapters and their optimizer state only: the base weights are the model folder's),
        plus ``engine_state.json`` with the step counter (which fixes the LR schedule position).
        ``path`` must be a directory every rank can write to (shared storage at world size > 1)."""
        self._ready()
        os.makedirs(path, exist_ok=True)
        dcp.save(self._checkpoint_state(), checkpoint_id=path)
        if dist.get_rank() == 0:
            with open(os.path.join(path, ENGINE_STATE_FILE), "w") as handle:
                json.dump({"step": self.step, "role": self.spec.role}, handle)
        dist.barrier()

    def load(self, path: str) -> None:
        """Restore what :meth:`save` wrote; the next ``train_step`` is then identical to the one
        that followed the save. A reference engine may load an actor checkpoint (weights only); a
        trainable engine only a checkpoint of its own role."""
        state_file = os.path.join(path, ENGINE_STATE_FILE)
        if not os.path.isfile(state_file):
            raise FileNotFoundError(f"{path!r} is not an fsdp engine checkpoint: {ENGINE_STATE_FILE} is missing")
        with open(state_file) as handle:
            engine_state = json.load(handle)
        saved_role = engine_state["role"]
        if self.trainable and saved_role != self.spec.role:
            no_optimizer = " and holds no optimizer state" if saved_role not in TRAINABLE_ROLES else ""
            raise ValueError(
                f"{path!r} was saved by an engine with role {saved_role!r}{no_optimizer}; an engine with "
                f"role {self.spec.role!r} can only resume from a {self.spec.role!r} checkpoint"
            )
        self._ready()
        state = self._checkpoint_state()
        dcp.load(state, checkpoint_id=path)  # reads into this engine's tensors: saved on either device
        set_state_dict(
            self.model,
            self.optimizer or [],
            model_state_dict=state["model"],
            optim_state_dict=state.get("optimizer", {}),
            # the frozen base is not in a LoRA checkpoint; dcp.load above has already refused missing adapters
            options=StateDictOptions(ignore_frozen_params=self.lora is not None, strict=self.lora is None),
        )
        self.step = int(engine_state["step"])

    def _checkpoint_state(self) -> dict:
        """Sharded state dicts of the model and (actor) optimizer, keyed as in the checkpoint; with LoRA the
        adapters only (frozen tensors are dropped, a tied LM head too, which torch keeps under its own name)."""
        options = StateDictOptions(ignore_frozen_params=self.lora is not None)
        model_state, optimizer_state = get_state_dict(self.model, self.optimizer or [], options=options)
        if self.lora is not None:
            model_state = {name: tensor for name, tensor in model_state.items() if ".lora_" in name}
        state = {"model": model_state}
        if self.optimizer is not None:
            state["optimizer"] = optimizer_state
        return state

    def offload(self) -> None:
        """Move parameter shards, gradients and optimizer state to host memory and return the
        GPU's cached blocks, so a colocated rollout engine can use the memory (no-op on CPU).
        The next call that needs them (or :meth:`onload`) brings them back; FSDP2 re-points its
        sharded parameters when the module moves (``FSDPModule._apply``)."""
        if self.device.type == "cpu" or self._offloaded:
            return
        move_train_state(self.model, self.optimizer, torch.device("cpu"))
        self._offloaded = True

    def onload(self) -> None:
        """Undo :meth:`offload` (no-op when nothing is offloaded)."""
        if not self._offloaded:
            return
        move_train_state(self.model, self.optimizer, self.device)
        self._offloaded = False

    def close(self) -> None:
        """Drop the model and optimizer and release the process group (destroyed if this package
        created it and no other engine uses it). Calling it again does nothing."""
        if not self._holds_group:
            return
        self.model = None
        self.optimizer = None
        self._holds_group = False
        if self.device.type == "cuda":
            torch.cuda.empty_cache()
        if self.sequence is not None:
            self.sequence.destroy()
        process_group.release()
