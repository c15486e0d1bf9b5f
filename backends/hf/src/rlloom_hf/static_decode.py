"""Decoding with preallocated KV caches and, on CUDA, one CUDA graph replay per token.

The eager loop (:mod:`rlloom_hf.decode`) launches every kernel of every layer for every token:
on a GPU a small model's decode step is then bound by kernel launches (tens of ms per token
whatever the batch). Here the decode step has static shapes, so it is captured once in a
``torch.cuda.CUDAGraph`` and each token is one graph replay.

Buckets. A call decodes N rows of P prompt tokens and up to M new tokens; it runs in the bucket
(rows = the next power of two ≥ N, length = P + M rounded up to :data:`LENGTH_MULTIPLE`). Each
bucket owns a KV cache of that size (every layer a full-length transformers ``StaticLayer``), the
decode step's input buffers and, on CUDA, its captured graph. At most ``max_buckets`` buckets are
kept, the least recently used dropped first (its cache and graph freed; a later call of that shape
builds and captures it again), and all graphs of a decoder allocate from one CUDA graph memory pool
and capture on one side stream of the decoder's device, so the pool holds about the largest
graph's temporaries, not their sum. Rows beyond N repeat row 0 and are discarded. Prompt lengths
vary from call to call inside a bucket: positions, the cache write position and the attention
mask are data, not shapes.

Devices. Every CUDA call names the decoder's device: the decode loop runs under
``torch.cuda.device(device)``, and capture, replay and the side stream are on that device even when
another GPU is the process's current one (``rollout.device=cuda:1``).

Sliding-window layers (Mistral v0.1, Phi-3, Gemma 2/3, Qwen2 with ``use_sliding_window``). Their
cache layers also keep every position (transformers' static sliding layers keep a rolling window
whose write logic is a Python counter that a captured graph cannot follow); the window is in the
mask instead: key column j is visible to query column i only when i - j < ``sliding_window``, the
rule transformers' own sliding masks apply (``sliding_window_overlay``), in the same cache columns
as the eager loop. Models with per-layer-type masks (``config.layer_types``) get a dict of masks
keyed by layer type; the others (one window for every layer) get the sliding mask itself. Layer
types other than full and sliding attention (chunked, linear, recurrent) are not supported:
:func:`static_decode_problem` says why (the engine then decodes eagerly under
``decode=auto`` and refuses ``static``/``graphs``).

Attention covers the whole bucket length L at every step, written or not (masked columns cost
compute, not results): limiting it to the written prefix would need one captured graph per prefix
length, since the key length is a shape. For decode steps the attention over L ≤ a few thousand
columns is small next to the weight reads of the MLPs at small batch; it grows with L x rows.

Why manual capture and not ``torch.compile(mode="reduce-overhead")``: compiling a 135M model takes
~10 s and a 0.5B one ~24 s (measured with ``generate``'s static cache on an H100,
../shared/gpu/README.md) and recompiles for new shapes, against a few hundred milliseconds of
capture per bucket; a quickstart run is ~15 steps of well under a second.

Step semantics equal the eager loop's: the attention mask is a prepared 4-D boolean mask
[rows, 1, q, length] (key j visible to query i when j is a real prompt token at or before i, or a
generated position already written; every query also sees itself, so padded prompt positions
never attend to nothing), position ids are ``cumsum(prompt_mask) - 1`` then the next positions,
and the cache write position is set explicitly before every forward. Sampling
(:func:`rlloom_hf.sampling.next_tokens`) runs eagerly on the device with counter-based streams
(:mod:`rlloom_hf.counter_rng`); whether every row has stopped is read back every
``eos_check_interval`` tokens only, and the result is trimmed to the longest response, so the
output equals a check after every token.
"""

from __future__ import annotations

import contextlib
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass

import torch
from rlloom import SamplingParams
from transformers import PretrainedConfig, PreTrainedModel
from transformers.cache_utils import Cache, StaticLayer

from rlloom_hf.counter_rng import CounterStreams
from rlloom_hf.decode import DecodedChunk, ResponseSlots
from rlloom_hf.sampling import next_tokens

LENGTH_MULTIPLE = 64
SUPPORTED_LAYER_TYPES = ("full_attention", "sliding_attention")


def bucket_shape(rows: int, length: int) -> tuple[int, int]:
    """(rows rounded up to a power of two, length rounded up to :data:`LENGTH_MULTIPLE`)."""
    return 1 << max(rows - 1, 0).bit_length(), -(-length // LENGTH_MULTIPLE) * LENGTH_MULTIPLE


def layer_types(config: PretrainedConfig) -> list[str]:
    """Each decoder layer's attention type, named as transformers' caches name them: the config's
    ``layer_types``, else every layer ``sliding_attention`` when it sets ``sliding_window``,
    ``chunked_attention`` when it sets ``attention_chunk_size``, ``full_attention`` otherwise."""
    text = config.get_text_config(decoder=True)
    if getattr(text, "layer_types", None) is not None:
        return list(text.layer_types)
    if getattr(text, "sliding_window", None) is not None:
        kind = "sliding_attention"
    elif getattr(text, "attention_chunk_size", None) is not None:
        kind = "chunked_attention"
    else:
        kind = "full_attention"
    return [kind] * text.num_hidden_layers


def static_decode_problem(config: PretrainedConfig) -> str | None:
    """Why the static decoder cannot run a model of this config (None when it can): a layer type
    outside :data:`SUPPORTED_LAYER_TYPES`, or layers that share other layers' KV cache."""
    others = sorted(set(layer_types(config)) - set(SUPPORTED_LAYER_TYPES))
    if others:
        return f"its layer types {others} are not among {list(SUPPORTED_LAYER_TYPES)}"
    if getattr(config.get_text_config(decoder=True), "num_kv_shared_layers", 0):
        return "some of its layers share other layers' KV cache"
    return None


@dataclass(frozen=True)
class MaskLayout:
    """How a model takes prepared attention masks (module doc, sliding-window layers).

    ``window``: the ``sliding_window`` of its sliding layers (None: it has none); ``keyed``: the
    model reads a dict ``{layer type: mask}`` (its config lists ``layer_types``), else one mask.
    """

    window: int | None
    keyed: bool

    @classmethod
    def of(cls, config: PretrainedConfig) -> MaskLayout:
        text = config.get_text_config(decoder=True)
        sliding = "sliding_attention" in layer_types(config)
        return cls(text.sliding_window if sliding else None, getattr(text, "layer_types", None) is not None)

    def masks(self, visible: torch.Tensor, query_columns: torch.Tensor) -> torch.Tensor | dict[str, torch.Tensor]:
        """The model's ``attention_mask`` from ``visible`` [rows, 1, q, L] (the full-attention mask)
        and the queries' cache columns [q, 1]: sliding layers also hide key column j from query
        column i when i - j >= window."""
        if self.window is None:
            return visible
        key_columns = torch.arange(visible.shape[-1], device=visible.device)
        sliding = visible & (key_columns > query_columns - self.window)
        return {"full_attention": visible, "sliding_attention": sliding} if self.keyed else sliding


def _set_write_position(cache: Cache, position: torch.Tensor) -> None:
    """Make every layer write its next keys/values at ``position`` (a 0-d int64 device tensor).

    transformers' static layers write at their ``cumulative_length`` counter; setting it before
    each forward (inside the captured region) keeps replays independent of warm-up runs."""
    for layer in cache.layers:
        if getattr(layer, "is_initialized", False):
            layer.cumulative_length.copy_(position)


def _on(device: torch.device) -> contextlib.AbstractContextManager:
    """``torch.cuda.device(device)`` on CUDA (kernels, streams and graphs default to it), else nothing."""
    return torch.cuda.device(device) if device.type == "cuda" else contextlib.nullcontext()


class _Bucket:
    """The static cache, decode-step buffers and (CUDA) captured graph of one bucket shape."""

    def __init__(self, model: PreTrainedModel, rows: int, length: int, device: torch.device,
                 layout: MaskLayout) -> None:
        self.model, self.rows, self.length, self.layout = model, rows, length, layout
        self.cache = Cache(layers=[StaticLayer(max_cache_len=length) for _ in layer_types(model.config)])
        self.input_ids = torch.zeros((rows, 1), dtype=torch.long, device=device)
        self.position_ids = torch.zeros((rows, 1), dtype=torch.long, device=device)
        self.write_at = torch.zeros((), dtype=torch.long, device=device)
        self.mask = torch.zeros((rows, 1, 1, length), dtype=torch.bool, device=device)
        self.logits: torch.Tensor | None = None
        self.graph: torch.cuda.CUDAGraph | None = None

    def prefill(self, prompt_ids: torch.Tensor, prompt_mask: torch.Tensor) -> torch.Tensor:
        """Run the prompts [rows, P] into the cache from position 0; logits [rows, V] of the last
        prompt position. Also resets the decode mask to the real prompt tokens."""
        prompt_len = prompt_ids.shape[1]
        device = prompt_ids.device
        keys_real = torch.zeros((self.rows, self.length), dtype=torch.bool, device=device)
        keys_real[:, :prompt_len] = prompt_mask.bool()
        query = torch.arange(prompt_len, device=device)[:, None]
        key = torch.arange(self.length, device=device)[None, :]
        visible = ((key <= query)[None] & keys_real[:, None, :]) | (key == query)[None]
        _set_write_position(self.cache, torch.zeros((), dtype=torch.long, device=device))
        out = self.model(
            input_ids=prompt_ids,
            attention_mask=self.layout.masks(visible[:, None], query),
            position_ids=(prompt_mask.cumsum(dim=1) - 1).clamp(min=0),
            past_key_values=self.cache,
            use_cache=True,
            logits_to_keep=1,
        )
        self.mask.copy_(keys_real[:, None, None, :])
        return out.logits[:, -1]

    def _forward(self) -> torch.Tensor:
        """One decode step from the buffers; writes and returns ``self.logits`` [rows, V]."""
        _set_write_position(self.cache, self.write_at)
        out = self.model(
            input_ids=self.input_ids,
            attention_mask=self.layout.masks(self.mask, self.write_at.view(1, 1)),
            position_ids=self.position_ids,
            past_key_values=self.cache,
            use_cache=True,
            logits_to_keep=1,
        )
        if self.logits is None:
            self.logits = torch.empty_like(out.logits[:, -1])
        self.logits.copy_(out.logits[:, -1])
        return self.logits

    def capture(self, stream: torch.cuda.Stream, pool: tuple[int, int]) -> None:
        """Record :meth:`_forward` in a CUDA graph on ``stream`` (a side stream of the bucket's
        device), its temporaries in the graph memory ``pool``, after one warm-up run on that stream
        as PyTorch requires. Must follow a :meth:`prefill` (the cache is allocated then) and run
        under ``torch.cuda.device`` of the bucket's device. The warm-up writes at the current
        ``write_at``, a position the next real step overwrites."""
        current = torch.cuda.current_stream(stream.device)
        stream.wait_stream(current)
        with torch.cuda.stream(stream):
            self._forward()
        current.wait_stream(stream)
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph, pool=pool, stream=stream):
            self._forward()
        self.graph = graph

    def step(self, tokens: torch.Tensor, column: int, positions: torch.Tensor) -> torch.Tensor:
        """Feed ``tokens`` [n ≤ rows] written at cache column ``column`` with ``positions``
        [rows, 1]; the next logits [rows, V] (a buffer the next step overwrites)."""
        self.input_ids[: len(tokens), 0].copy_(tokens)
        self.position_ids.copy_(positions)
        self.write_at.fill_(column)
        self.mask[:, 0, 0, column] = True
        if self.graph is None:
            return self._forward()
        self.graph.replay()
        return self.logits


class StaticDecoder:
    """Decodes chunks like :func:`rlloom_hf.decode.decode_chunk`, in buckets (module doc).

    ``graphs``: capture each bucket's decode step in a CUDA graph (CUDA only); without it the same
    static-shape step runs eagerly (the CPU test path). ``eos_check_interval``: tokens between two
    reads of "has every row stopped" from the device. ``max_buckets``: buckets kept at once (least
    recently used dropped first). ValueError when :func:`static_decode_problem` finds one.
    """

    def __init__(self, model: PreTrainedModel, device: torch.device, graphs: bool, eos_check_interval: int,
                 max_buckets: int) -> None:
        if graphs and device.type != "cuda":
            raise ValueError(f"CUDA graphs need a CUDA device, not {device}")
        problem = static_decode_problem(model.config)
        if problem is not None:
            raise ValueError(f"static decoding cannot run this model: {problem}")
        self.model, self.device, self.graphs = model, device, graphs
        self.eos_check_interval, self.max_buckets = eos_check_interval, max_buckets
        self.layout = MaskLayout.of(model.config)
        self._buckets: OrderedDict[tuple[int, int], _Bucket] = OrderedDict()
        self._pool = torch.cuda.graph_pool_handle() if graphs else None
        self._stream: torch.cuda.Stream | None = None

    def release(self) -> None:
        """Drop every bucket's cache and graph (memory returns to the caching allocator)."""
        self._buckets.clear()

    def _bucket(self, rows: int, length: int) -> tuple[_Bucket, bool]:
        """The bucket for this shape, most recently used now; built (dropping the least recently
        used beyond ``max_buckets``) when new: then the flag is True."""
        shape = bucket_shape(rows, length)
        fresh = shape not in self._buckets
        if fresh:
            while len(self._buckets) >= self.max_buckets:
                self._buckets.popitem(last=False)
            self._buckets[shape] = _Bucket(self.model, *shape, self.device, self.layout)
        self._buckets.move_to_end(shape)
        return self._buckets[shape], fresh

    def _capture(self, bucket: _Bucket) -> None:
        if self._stream is None:
            self._stream = torch.cuda.Stream(self.device)
        bucket.capture(self._stream, self._pool)

    @torch.no_grad()
    def decode(
        self,
        prompt_ids: torch.Tensor,
        prompt_mask: torch.Tensor,
        copies: torch.Tensor,
        sampling: SamplingParams,
        stop_ids: torch.Tensor,
        pad_id: int,
        streams: CounterStreams | None,
        cancelled: Callable[[], torch.Tensor] | None = None,
        budgets: torch.Tensor | None = None,
    ) -> DecodedChunk:
        """Same contract as :func:`rlloom_hf.decode.decode_chunk` (streams: counter-based). The
        bucket's shape is fixed, so cancelled rows are still computed until the chunk ends (their
        tokens are not recorded); once every row is cancelled the loop stops at that step."""
        with _on(self.device):
            owner = torch.repeat_interleave(torch.arange(len(copies), device=copies.device), copies)
            rows, prompt_len, max_new = len(owner), prompt_ids.shape[1], sampling.max_new_tokens
            bucket, fresh = self._bucket(rows, prompt_len + max_new)
            fill = torch.zeros(bucket.rows - rows, dtype=torch.long, device=owner.device)
            ids, mask_in = prompt_ids[torch.cat([owner, fill])], prompt_mask[torch.cat([owner, fill])]
            logits = bucket.prefill(ids, mask_in)[:rows]
            if fresh and self.graphs:
                bucket.write_at.fill_(prompt_len)
                self._capture(bucket)
            next_position = mask_in.sum(dim=1, keepdim=True)

            slots = ResponseSlots(rows, max_new, pad_id, self.device, budgets)
            for step in range(max_new):
                slots.record(step, *next_tokens(logits, sampling, streams), stop_ids)
                if cancelled is not None:
                    flags = cancelled()
                    slots.withdraw(flags)
                    if bool(flags.all()):
                        break
                if step + 1 == max_new or ((step + 1) % self.eos_check_interval == 0 and bool(slots.finished.all())):
                    break
                logits = bucket.step(slots.tokens[:, step], prompt_len + step, next_position + step)[:rows]
            return slots.chunk(int(slots.mask.sum(dim=1).max()))
