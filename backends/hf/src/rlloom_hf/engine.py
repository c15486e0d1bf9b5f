"""``HFRolloutEngine``: the :class:`rlloom.protocols.RolloutEngine` on Hugging Face transformers."""

from __future__ import annotations

import functools
from collections.abc import Callable, Iterable

import torch
import torch.nn.functional as F
from rlloom import Batch, Completion, EngineSpec, SamplingParams
from rlloom_enginekit.batching import BatchingScheduler
from rlloom_enginekit.devices import rank_device, resolve_dtype, role_device
from rlloom_enginekit.partial import INTERRUPTED_FIELD
from rlloom_enginekit.prompts import (MAX_TOKENS_FIELD, RESPONSE_INDEX_FIELD, check_left_padded, pad_token_id,
                                      prompt_indices, row_seeds, stop_ids_for, stop_token_ids)
from transformers import AutoModelForCausalLM, AutoTokenizer

from rlloom_hf.config import DECODE_MODES, HFRolloutConfig
from rlloom_hf.counter_rng import CounterStreams
from rlloom_hf.decode import DecodedChunk, ResponseSlots, decode_chunk
from rlloom_hf.sampling import ResponseStreams, use_float32_head
from rlloom_hf.static_decode import StaticDecoder, static_decode_problem


def _collate(chunks: list[DecodedChunk], pad_id: int) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Stack the chunks' rows on the CPU, right-padding each to the longest response R:
    ``(responses [N, R] int64, response_mask [N, R] int64, rollout_log_probs [N, R] float32)``."""
    if not chunks:
        return (torch.zeros((0, 0), dtype=torch.long), torch.zeros((0, 0), dtype=torch.long),
                torch.zeros((0, 0), dtype=torch.float32))
    length = max(chunk.tokens.shape[1] for chunk in chunks)

    def stack(parts: list[torch.Tensor], fill: float) -> torch.Tensor:
        return torch.cat([F.pad(part.cpu(), (0, length - part.shape[1]), value=fill) for part in parts])

    return (stack([c.tokens for c in chunks], pad_id), stack([c.mask for c in chunks], 0),
            stack([c.log_probs for c in chunks], 0.0))


def _first_of_equal_runs(prompt_ids: torch.Tensor, prompt_mask: torch.Tensor) -> torch.Tensor:
    """[B] int64: for each prompt row, the first row of the run of consecutive equal rows (ids and mask) it is in,
    so that a run's prompt is prefilled once for all its responses."""
    same = torch.zeros(len(prompt_ids), dtype=torch.bool)
    same[1:] = (prompt_ids[1:] == prompt_ids[:-1]).all(dim=1) & (prompt_mask[1:] == prompt_mask[:-1]).all(dim=1)
    places = torch.arange(len(prompt_ids))
    return torch.where(same, 0, places).cummax(dim=0).values if len(places) else places


FinishedRows = Callable[[list[int], list[list[int]], list[list[float]]], None]
"""``finished(rows, tokens, log_probs)``: output rows done, each row's sampled tokens and their log-probs."""


class _Reporter:
    """Hands a chunk's rows (output rows ``rows``) to ``finished`` as they stop, each once."""

    def __init__(self, rows: torch.Tensor, finished: FinishedRows) -> None:
        self.rows, self.finished = rows, finished
        self.reported = torch.zeros(len(rows), dtype=torch.bool)

    def stopped(self, local: torch.Tensor, slots: ResponseSlots) -> None:
        """The decoding loop's ``stopped``: the chunk rows ``local`` drew a stop id."""
        if len(local):
            self._report(local.cpu(), slots.tokens, slots.mask, slots.log_probs)

    def ended(self, chunk: DecodedChunk) -> None:
        """The chunk's rows neither reported nor withdrawn."""
        left = (~self.reported & ~chunk.cut.cpu()).nonzero().squeeze(1)
        if len(left):
            self._report(left, chunk.tokens, chunk.mask, chunk.log_probs)

    def _report(self, local: torch.Tensor, tokens: torch.Tensor, mask: torch.Tensor, log_probs: torch.Tensor) -> None:
        self.reported[local] = True
        lengths = mask[local.to(mask.device)].sum(dim=1).tolist()
        picked, values = tokens[local.to(tokens.device)].cpu(), log_probs[local.to(tokens.device)].cpu()
        self.finished(self.rows[local].tolist(), [row[:n].tolist() for row, n in zip(picked, lengths)],
                      [row[:n].tolist() for row, n in zip(values, lengths)])


def decode_mode(decode: str, device: torch.device, config) -> str:
    """The decoding loop ``rollout.decode`` asks for: ``auto`` is ``graphs`` on CUDA and ``eager``
    elsewhere, or where the static decoder cannot run the model
    (:func:`~rlloom_hf.static_decode.static_decode_problem`); an explicit ``static``/``graphs`` for
    such a model is a ValueError naming the setting and the choices."""
    problem = static_decode_problem(config)
    if decode == "auto":
        return "graphs" if device.type == "cuda" and problem is None else "eager"
    if decode != "eager" and problem is not None:
        raise ValueError(f"rollout.decode={decode!r} cannot run this model ({problem}): choose 'eager' or 'auto' "
                         f"(one of {list(DECODE_MODES)})")
    return decode


class HFRolloutEngine:
    """Samples responses with a transformers causal LM; see :meth:`generate` for the contract.

    Loads the model and tokenizer from ``spec.model_path`` onto ``cfg.device`` (else the run's
    device; a plain ``cuda`` is this rank's GPU, ``LOCAL_RANK`` under torchrun:
    :func:`~rlloom_enginekit.devices.rank_device`) in ``cfg.dtype``; the LM head returns float32
    logits (:func:`~rlloom_hf.sampling.use_float32_head`). ``tokenizer`` is public (the controller
    decodes responses with it).
    The call's seed is drawn from a generator seeded with ``spec.seed`` unless a call gives
    ``sampling.seed``. The decoding loop is ``cfg.decode`` (see :class:`HFRolloutConfig`).
    ``decode_steps``: model calls made by the decoding loops so far (each chunk's response length).
    """

    flags_interrupted_rows = True  # rlloom_enginekit.partial.Interruptible: generate_requests flags withdrawn rows
    reports_finished_rows = True  # rlloom_enginekit.stream.StreamsRows: generate_requests hands on finished rows

    def __init__(self, cfg: HFRolloutConfig, spec: EngineSpec) -> None:
        self.config = cfg
        self.device = rank_device(role_device(cfg.device, spec.device, "rollout.device"))
        self.tokenizer = AutoTokenizer.from_pretrained(spec.model_path)
        model = AutoModelForCausalLM.from_pretrained(
            spec.model_path, dtype=resolve_dtype(cfg.dtype, self.device, "rollout.dtype"),
            attn_implementation=cfg.attn_implementation,
        )
        self.model = model.to(self.device).eval()
        use_float32_head(self.model)
        self.stop_ids = stop_token_ids(self.model.generation_config, self.tokenizer)
        self.pad_id = pad_token_id(self.model.generation_config, self.tokenizer, self.stop_ids)
        self._generator = torch.Generator().manual_seed(spec.seed)
        mode = decode_mode(cfg.decode, self.device, self.model.config)
        self._static = None if mode == "eager" else StaticDecoder(
            self.model, self.device, graphs=mode == "graphs", eos_check_interval=cfg.eos_check_interval,
            max_buckets=cfg.max_buckets)
        self._asleep = False
        self._scheduler: BatchingScheduler | None = None
        self.decode_steps = 0

    # ------------------------------------------------------------------------------ generation
    async def generate_one(self, prompt_ids: list[int], sampling: SamplingParams) -> Completion:
        """One prompt's responses (contract: ``AsyncRolloutEngine.generate_one``): requests are
        gathered into :meth:`generate` calls of up to ``cfg.max_batch_rows`` prompts by a
        :class:`~rlloom_enginekit.batching.BatchingScheduler`, so the tokens equal a batch call's."""
        if self._scheduler is None:
            self._scheduler = BatchingScheduler(self, max_batch_prompts=self.config.max_batch_rows)
        return await self._scheduler.generate_one(prompt_ids, sampling)

    def generate(self, prompts: Batch, sampling: SamplingParams) -> Batch:
        """Sample ``sampling.n`` responses per prompt row (contract: ``RolloutEngine.generate``).

        Output rows ``i*n … i*n+n-1`` answer prompt ``i`` and carry its fields (``Batch.repeat``).
        Rows are decoded ``cfg.max_batch_rows`` at a time (the eager loop prefills each distinct
        prompt of a chunk once). Response ``j`` of prompt ``i`` draws from its own stream keyed by
        (seed, ``sampling.first_prompt`` + i, j) (:class:`~rlloom_hf.sampling.ResponseStreams` in
        the eager loop, :class:`~rlloom_hf.counter_rng.CounterStreams` in the static ones; a
        ``prompt_index`` field gives each row's index instead of ``first_prompt`` + i, a
        ``sampling_seed`` field each row's seed): with
        ``sampling.seed`` set, the same weights and prompt give the same response whatever else is
        in the batch, the chunk size, or how a call was split; without it the seed is drawn from
        the engine's generator (seeded with ``spec.seed``). A :data:`~rlloom_enginekit.prompts.RESPONSE_INDEX_FIELD`
        field offsets each row's response indices in that key; a :data:`~rlloom_enginekit.prompts.MAX_TOKENS_FIELD`
        field gives each row its own budget (at most ``sampling.max_new_tokens``). Consecutive equal prompt rows
        are prefilled once. ``sampling.ignore_eos``: no stop id
        of the model's ends a response (``sampling.stop_token_ids`` still do).
        """
        return self.generate_requests(prompts, sampling)

    def generate_requests(self, prompts: Batch, sampling: SamplingParams, cancelled: torch.Tensor | None = None,
                          finished: FinishedRows | None = None) -> Batch:
        """:meth:`generate` with rows withdrawn mid-call (contract:
        ``rlloom.protocols.BatchesRequests``): a chunk whose prompts are all ``cancelled`` is not
        decoded, and the decoding loops read ``cancelled`` before every step. ``finished(rows, tokens,
        log_probs)`` (:class:`rlloom_enginekit.stream.StreamsRows`) gets each output row once it is done, before
        the call returns: in the eager loop at the step it draws a stop id or reaches its own budget, else
        (``max_new_tokens`` reached, the static loops) when its chunk ends; withdrawn rows are not reported. Adds
        the chunks' response lengths (one model call per token) to :attr:`decode_steps`."""
        model = self._ready("generate")
        prompts.require("prompts", "prompt_mask")
        check_left_padded(prompts["prompts"], prompts["prompt_mask"])
        seed = sampling.seed
        if seed is None:
            seed = int(torch.randint(2**62, (), generator=self._generator))
        chunks = self._decode_chunks(model, prompts, sampling, row_seeds(prompts, seed), cancelled, finished)
        out = prompts.repeat(sampling.n)
        out["responses"], out["response_mask"], out["rollout_log_probs"] = _collate(chunks, self.pad_id)
        if cancelled is not None:
            out[INTERRUPTED_FIELD] = torch.cat([chunk.cut.cpu() for chunk in chunks]) if chunks else (
                torch.zeros(0, dtype=torch.bool))
        out.meta["temperature"] = sampling.policy_temperature
        out.meta["pad_token_id"] = self.pad_id
        return out

    def _decode_chunks(self, model, prompts: Batch, sampling: SamplingParams, seeds: torch.Tensor,
                       cancelled: torch.Tensor | None, finished: FinishedRows | None) -> list[DecodedChunk]:
        """The responses of every row, ``cfg.max_batch_rows`` rows at a time (see :meth:`generate`)."""
        prompt_ids, prompt_mask = prompts["prompts"], prompts["prompt_mask"]
        stop_ids = torch.tensor(stop_ids_for(self.stop_ids, sampling), dtype=torch.long, device=self.device)
        decode, stream_type = (functools.partial(decode_chunk, model), ResponseStreams) if self._static is None else (
            self._static.decode, CounterStreams)
        indices = prompt_indices(prompts, sampling.first_prompt)
        first_response = prompts.get(RESPONSE_INDEX_FIELD, torch.zeros(len(prompts), dtype=torch.long))
        budgets = prompts.get(MAX_TOKENS_FIELD)
        kin = _first_of_equal_runs(prompt_ids, prompt_mask)
        total = len(prompts) * sampling.n
        chunks: list[DecodedChunk] = []
        for start in range(0, total, self.config.max_batch_rows):
            rows = torch.arange(start, min(start + self.config.max_batch_rows, total))
            owners = rows // sampling.n
            if cancelled is not None and bool(cancelled[owners].all()):
                none = torch.zeros((len(rows), 0), dtype=torch.long)
                chunks.append(DecodedChunk(none, none, none.float(), torch.ones(len(rows), dtype=torch.bool)))
                continue
            unique, copies = torch.unique_consecutive(kin[owners], return_counts=True)
            streams = None if sampling.greedy else stream_type(
                seeds[owners], indices[owners], first_response[owners] + rows % sampling.n, self.device)
            report = None if finished is None else _Reporter(rows, finished)
            watch = None if cancelled is None else functools.partial(cancelled.__getitem__, owners)
            args = (prompt_ids[unique].to(self.device), prompt_mask[unique].to(self.device), copies.to(self.device),
                    sampling, stop_ids, self.pad_id, streams, watch)
            extra = {} if budgets is None else {"budgets": budgets[owners]}
            chunk = decode(*args, **extra) if report is None or self._static else decode(
                *args, stopped=report.stopped, **extra)
            if report is not None:
                report.ended(chunk)
            self.decode_steps += chunk.tokens.shape[1]
            chunks.append(chunk)
        return chunks

    # ------------------------------------------------------------------------------ weights
    def update_weights(self, named_tensors: Iterable[tuple[str, torch.Tensor]]) -> None:
        """Copy full tensors, named as in the model's ``state_dict`` (Hugging Face naming), into the
        model in place (cast to the model's dtype and device).

        Tied weights share one tensor, so updating either name (``lm_head.weight`` or
        ``model.embed_tokens.weight`` when tied) updates both. An unknown name or a shape mismatch
        raises a ValueError naming it; tensors before it in ``named_tensors`` are already copied
        (the input is streamed, never held whole).
        """
        model = self._ready("update_weights", allow_asleep=True)
        targets = model.state_dict(keep_vars=True)
        with torch.no_grad():
            for name, tensor in named_tensors:
                target = targets.get(name)
                if target is None:
                    raise ValueError(f"update_weights: the model has no weight named {name!r} "
                                     f"(it has e.g. {list(targets)[:3]})")
                if tensor.shape != target.shape:
                    raise ValueError(f"update_weights: {name!r} has shape {tuple(tensor.shape)}, "
                                     f"the model's is {tuple(target.shape)}")
                target.copy_(tensor)

    def borrow_weights(self, named_tensors: Iterable[tuple[str, torch.Tensor]]) -> int:
        """Generate with another engine's tensors (:class:`rlloom.protocols.BorrowsWeights`): each named
        parameter of the model is pointed at the given tensor's storage, nothing copied, and the model's
        own copy is freed; returns the bytes freed (0 when it already borrowed them). Names as in
        :meth:`update_weights` (a tied weight's one name covers both). ValueError naming the tensor on an
        unknown name or a shape, dtype or device that differs (``rollout.dtype`` must equal the train
        engine's). Decoding buffers that hold weight addresses (CUDA graphs) are dropped when any moved."""
        model = self._ready("borrow_weights", allow_asleep=True)
        targets = model.state_dict(keep_vars=True)
        freed = 0
        for name, tensor in named_tensors:
            target = targets.get(name)
            if target is None:
                raise ValueError(f"borrow_weights: the model has no weight named {name!r}")
            mine = (tuple(target.shape), target.dtype, target.device)
            theirs = (tuple(tensor.shape), tensor.dtype, tensor.device)
            if mine != theirs:
                raise ValueError(f"borrow_weights: {name!r} is {theirs} (shape, dtype, device) in the train engine, "
                                 f"{mine} here: resharder=shared needs rollout.dtype and the device to match")
            if target.data_ptr() != tensor.data_ptr():
                freed += target.numel() * target.element_size()
                target.data = tensor
        if freed and self._static is not None:
            self._static.release()
        return freed

    # ------------------------------------------------------------------------------ lifecycle
    def sleep(self) -> None:
        """Enter the asleep state until :meth:`wake_up`; ``generate`` refuses to run meanwhile.

        On an accelerator, frees what ``cfg.sleep_level`` says (1: the static decoder's caches and
        CUDA graphs; 2: also the weights, moved to host memory) and empties the CUDA cache. On the
        CPU nothing is freed: the weights must stay somewhere, and the eager loop's KV cache lives
        only inside a ``generate`` call.
        """
        model = self._ready("sleep", allow_asleep=True)
        if self.device.type != "cpu" and self.config.sleep_level > 0:
            if self._static is not None:
                self._static.release()  # graphs hold the weights' addresses: drop them first
            if self.config.sleep_level > 1:
                model.to("cpu")
            if self.device.type == "cuda":
                torch.cuda.empty_cache()
        self._asleep = True

    def wake_up(self) -> None:
        """Leave the asleep state, moving the weights back to the configured device if they left."""
        self._ready("wake_up", allow_asleep=True).to(self.device)
        self._asleep = False

    def close(self) -> None:
        """Drop the model and decoding buffers (the tokenizer stays usable for decoding). Later
        calls raise."""
        self.model = None
        self._static = None
        if self._scheduler is not None:
            self._scheduler.close()
            self._scheduler = None

    def _ready(self, action: str, allow_asleep: bool = False):
        if self.model is None:
            raise RuntimeError(f"HFRolloutEngine.{action}: the engine is closed")
        if self._asleep and not allow_asleep:
            raise RuntimeError(f"HFRolloutEngine.{action}: the engine is asleep; call wake_up() first")
        return self.model
