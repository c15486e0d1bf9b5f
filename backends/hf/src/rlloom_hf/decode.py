"""The batched KV-cache sampling loop over one chunk of response rows.

One call prefills each distinct prompt once, copies its KV cache to the rows that answer it, then decodes the
running rows one token per model call until each row has produced a stop token or ``max_new_tokens`` tokens. A
row that stops leaves the batch (its KV cache rows are dropped), so later model calls compute only the rows
still running. No buffer is sized by ``max_new_tokens`` up front: the response slots and the attention mask
start at :data:`FIRST_WIDTH` columns and double when a step needs more (:func:`grown`), and so do the KV
cache's full-attention layers (:class:`GrowingLayer`: each token is written in place, not concatenated onto a
copy of the cache). Position ids follow ``cumsum(attention_mask) - 1`` (as in
:func:`rlloom_enginekit.sequences.concat_prompt_response`), so the first real prompt token is at position 0
whatever the left padding, and the log-probs match a teacher-forced forward over prompt + response.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import torch
from rlloom import SamplingParams
from transformers import DynamicCache, PreTrainedModel
from transformers.cache_utils import DynamicLayer

from rlloom_hf.sampling import ResponseStreams, next_tokens


@dataclass(frozen=True)
class DecodedChunk:
    """Responses of one chunk of N rows, T = the longest response in the chunk.

    ``tokens`` [N, T] int64 right-padded with the pad id, ``mask`` [N, T] int64 (1 on generated
    tokens, the stop token included), ``log_probs`` [N, T] float32 (0 where ``mask`` is 0), ``cut``
    [N] bool: the row was withdrawn (cancelled) before it stopped on its own.
    """

    tokens: torch.Tensor
    mask: torch.Tensor
    log_probs: torch.Tensor
    cut: torch.Tensor


FIRST_WIDTH = 64  # columns of the response buffers before they first grow


def grown(tensor: torch.Tensor, needed: int, limit: int, fill: float) -> torch.Tensor:
    """``tensor`` [N, W] when W >= ``needed``, else a copy widened with ``fill`` columns to
    min(``limit``, max(``needed``, 2W)): doubling, so T steps copy O(T) columns in all."""
    width = tensor.shape[1]
    if width >= needed:
        return tensor
    extra = tensor.new_full((tensor.shape[0], min(limit, max(needed, 2 * width)) - width), fill)
    return torch.cat([tensor, extra], dim=1)


class GrowingLayer(DynamicLayer):
    """A full-attention KV cache layer whose keys and values live in buffers [N, H, C, D] of C >= S columns, S the
    columns written: a step's S' new columns are written in place at S .. S + S' - 1 and the layer returns views of
    the first S + S' columns. When they do not fit, the buffers are copied into ones of max(S + S', 2C) columns
    (doubling: T tokens copy O(T) columns in all), where ``DynamicLayer`` copies the whole cache at every token to
    concatenate the new one. Rows are selected (``reorder_cache``) by copying the written columns of the buffers'
    rows; transformers' other cache edits (``crop``, ``batch_select_indices``, ``batch_repeat_interleave``,
    ``offload``, ``prefetch``) act on the views and leave the results as the buffers."""

    def lazy_initialization(self, key_states: torch.Tensor, value_states: torch.Tensor) -> None:
        super().lazy_initialization(key_states, value_states)
        self.written = 0
        self.key_buffer, self.value_buffer = key_states[:, :, :0], value_states[:, :, :0]

    def update(self, key_states: torch.Tensor, value_states: torch.Tensor, *args, **kwargs
               ) -> tuple[torch.Tensor, torch.Tensor]:
        if not self.is_initialized:
            self.lazy_initialization(key_states, value_states)
        end = self.written + key_states.shape[-2]
        if end > self.key_buffer.shape[-2]:
            self.key_buffer = self._widened(self.key_buffer, end)
            self.value_buffer = self._widened(self.value_buffer, end)
        self.key_buffer[:, :, self.written : end] = key_states
        self.value_buffer[:, :, self.written : end] = value_states
        self.written = end
        self._view()
        return self.keys, self.values

    def _widened(self, buffer: torch.Tensor, needed: int) -> torch.Tensor:
        rows, heads, columns, dim = buffer.shape
        wider = buffer.new_empty((rows, heads, max(needed, 2 * columns), dim))
        wider[:, :, : self.written] = buffer[:, :, : self.written]
        return wider

    def _view(self) -> None:
        self.keys, self.values = self.key_buffer[:, :, : self.written], self.value_buffer[:, :, : self.written]

    def get_seq_length(self) -> int:
        return self.written if self.is_initialized else 0

    def reorder_cache(self, beam_idx: torch.LongTensor) -> None:
        if self.get_seq_length() > 0:
            rows = beam_idx.to(self.key_buffer.device)
            self.key_buffer, self.value_buffer = self._rows(self.key_buffer, rows), self._rows(self.value_buffer, rows)
            self._view()

    def _rows(self, buffer: torch.Tensor, rows: torch.Tensor) -> torch.Tensor:
        kept = buffer.new_empty((len(rows), *buffer.shape[1:]))
        torch.index_select(buffer[:, :, : self.written], 0, rows, out=kept[:, :, : self.written])
        return kept

    def _adopt(self) -> None:
        """After a base-class method replaced ``keys``/``values`` (cropped, selected, repeated or moved them), they
        become the buffers (with no spare columns: the next token widens them)."""
        if self.is_initialized:
            self.key_buffer, self.value_buffer, self.written = self.keys, self.values, self.keys.shape[-2]

    def crop(self, tokens_to_remove: int) -> None:
        super().crop(tokens_to_remove)
        self._adopt()

    def batch_select_indices(self, indices: torch.Tensor) -> None:
        super().batch_select_indices(indices)
        self._adopt()

    def batch_repeat_interleave(self, repeats: int) -> None:
        super().batch_repeat_interleave(repeats)
        self._adopt()

    def offload(self) -> None:
        super().offload()
        self._adopt()

    def prefetch(self) -> None:
        super().prefetch()
        self._adopt()


def growing_cache(config) -> DynamicCache:
    """transformers' ``DynamicCache`` for ``config`` with each plain full-attention layer a :class:`GrowingLayer`
    (sliding-window and other special layers as transformers builds them)."""
    cache = DynamicCache(config=config)
    cache.layers = [GrowingLayer() if type(layer) is DynamicLayer else layer for layer in cache.layers]
    return cache


class ResponseSlots:
    """The responses of a chunk while they are decoded, shared by the eager and static loops:
    ``tokens`` [N, W] (pad id after a row stops), ``mask`` [N, W], ``log_probs`` [N, W] of the sampled
    tokens, and ``finished`` [N] (the row has emitted a stop id, or holds its ``budgets`` [N] tokens when given).
    W starts at min(M, :data:`FIRST_WIDTH`)
    for M = ``max_new`` and grows (:func:`grown`, at most M) as steps are recorded."""

    def __init__(self, rows: int, max_new: int, pad_id: int, device: torch.device,
                 budgets: torch.Tensor | None = None) -> None:
        self.pad_id = pad_id
        self.max_new = max_new
        self.budgets = None if budgets is None else budgets.to(device)
        width = min(max_new, FIRST_WIDTH)
        self.tokens = torch.full((rows, width), pad_id, dtype=torch.long, device=device)
        self.mask = torch.zeros((rows, width), dtype=torch.long, device=device)
        self.log_probs = torch.zeros((rows, width), dtype=torch.float32, device=device)
        self.finished = torch.zeros(rows, dtype=torch.bool, device=device)
        self.cut = torch.zeros(rows, dtype=torch.bool, device=device)

    def _room_for(self, step: int) -> None:
        self.tokens = grown(self.tokens, step + 1, self.max_new, self.pad_id)
        self.mask = grown(self.mask, step + 1, self.max_new, 0)
        self.log_probs = grown(self.log_probs, step + 1, self.max_new, 0.0)

    def record(self, step: int, picked: torch.Tensor, picked_log_probs: torch.Tensor, stop_ids: torch.Tensor) -> None:
        """Write the tokens drawn at ``step`` for every row (the static loop computes all of them):
        running rows keep theirs, finished rows get padding; mark rows that drew a stop id."""
        self._room_for(step)
        alive = ~self.finished
        self.tokens[:, step] = torch.where(alive, picked, self.pad_id)
        self.log_probs[:, step] = torch.where(alive, picked_log_probs, 0.0)
        self.mask[:, step] = alive.long()
        self.finished |= torch.isin(picked, stop_ids)
        if self.budgets is not None:
            self.finished |= self.budgets <= step + 1

    def record_running(self, step: int, rows: torch.Tensor, picked: torch.Tensor, picked_log_probs: torch.Tensor,
                       stop_ids: torch.Tensor) -> None:
        """Write the tokens drawn at ``step`` for ``rows`` (indices of rows still running, one per
        entry of ``picked``); mark those that drew a stop id."""
        self._room_for(step)
        self.tokens[rows, step] = picked
        self.log_probs[rows, step] = picked_log_probs
        self.mask[rows, step] = 1
        stop = torch.isin(picked, stop_ids)
        self.finished[rows] = stop if self.budgets is None else stop | (self.budgets[rows] <= step + 1)

    def withdraw(self, rows: torch.Tensor) -> None:
        """Stop the rows flagged True in ``rows`` [N] bool (any device): they count as finished from
        now on, the tokens they have stay; those still running are ``cut``."""
        rows = rows.to(self.finished.device, non_blocking=True)
        self.cut |= rows & ~self.finished
        self.finished |= rows

    def chunk(self, length: int) -> DecodedChunk:
        """The first ``length`` tokens of every row."""
        return DecodedChunk(self.tokens[:, :length], self.mask[:, :length], self.log_probs[:, :length], self.cut)


def _prefill(
    model: PreTrainedModel, prompt_ids: torch.Tensor, prompt_mask: torch.Tensor, copies: torch.Tensor
) -> tuple[torch.Tensor, torch.Tensor, DynamicCache, torch.Tensor]:
    """One forward over each distinct prompt (columns that are padding in every row dropped: they carry no
    information): ``(the trimmed prompt_mask [U, P'], owner [N]: each output row's prompt, the KV cache
    expanded to the N rows, the N rows' next-token logits)``."""
    first_real = int(prompt_mask.any(dim=0).nonzero()[0])
    prompt_ids, prompt_mask = prompt_ids[:, first_real:], prompt_mask[:, first_real:]
    positions = (prompt_mask.cumsum(dim=1) - 1).clamp(min=0)
    cache = growing_cache(model.config)
    prefill = model(input_ids=prompt_ids, attention_mask=prompt_mask, position_ids=positions,
                    past_key_values=cache, use_cache=True, logits_to_keep=1)
    owner = torch.repeat_interleave(torch.arange(len(copies), device=copies.device), copies)
    if len(owner) != len(copies):
        cache.reorder_cache(owner)
    return prompt_mask, owner, cache, prefill.logits[owner, -1]


@torch.no_grad()
def decode_chunk(
    model: PreTrainedModel,
    prompt_ids: torch.Tensor,
    prompt_mask: torch.Tensor,
    copies: torch.Tensor,
    sampling: SamplingParams,
    stop_ids: torch.Tensor,
    pad_id: int,
    streams: ResponseStreams | None,
    cancelled: Callable[[], torch.Tensor] | None = None,
    stopped: Callable[[torch.Tensor, ResponseSlots], None] | None = None,
    budgets: torch.Tensor | None = None,
) -> DecodedChunk:
    """Sample responses for ``copies[i]`` rows of each distinct prompt ``i``.

    ``prompt_ids`` / ``prompt_mask``: [U, P] left-padded, every row with at least one real token.
    ``copies``: [U] int64 >= 1; the output has ``copies.sum()`` rows, grouped by prompt in order.
    ``stop_ids``: 1-D int64 ids that end a response (may be empty: then only ``max_new_tokens``
    does). ``streams``: the rows' random streams (None when greedy). All tensors live on the model's
    device. ``cancelled()``: [N] bool (CPU), called before every decode step: rows flagged True stop
    there (:meth:`ResponseSlots.withdraw`) and leave the batch as stopped rows do. ``stopped(rows, slots)``:
    called after every step with the chunk's rows [k] that drew a stop id at that step or reached their
    ``budgets`` [N] (each row's own ``max_new_tokens``; not those that run to ``max_new_tokens``), so that a
    caller can hand them on before the chunk ends.
    """
    prompt_mask, owner, cache, logits = _prefill(model, prompt_ids, prompt_mask, copies)
    rows, prompt_len, max_new = len(owner), prompt_mask.shape[1], sampling.max_new_tokens
    attention = prompt_mask[owner]
    next_position = prompt_mask.sum(dim=1)[owner].unsqueeze(1)
    slots = ResponseSlots(rows, max_new, pad_id, logits.device, budgets)
    running = torch.arange(rows, device=logits.device)  # the chunk's rows the model still runs, in batch order
    for step in range(max_new):
        slots.record_running(step, running, *next_tokens(logits, sampling, streams), stop_ids)
        if stopped is not None:
            stopped(running[slots.finished[running]], slots)
        if cancelled is not None:
            slots.withdraw(cancelled())
        if step + 1 == max_new or bool(slots.finished.all()):
            break
        going_on = ~slots.finished[running]
        if not bool(going_on.all()):
            kept = going_on.nonzero().squeeze(1)
            running, attention, next_position = running[kept], attention[kept], next_position[kept]
            cache.reorder_cache(kept)
            streams = None if streams is None else streams.select(kept)
        attention = grown(attention, prompt_len + step + 1, prompt_len + max_new, 1)
        out = model(
            input_ids=slots.tokens[running, step : step + 1],
            attention_mask=attention[:, : prompt_len + step + 1],
            position_ids=next_position + step,
            past_key_values=cache,
            use_cache=True,
        )
        logits = out.logits[:, -1]

    return slots.chunk(step + 1)
