"""The HTTP API's JSON, both ways: the SGLang-compatible subset ``rlloom serve`` answers and
``rollout=server`` (and ``rollout=sglang``) sends.

``POST /generate`` request (SGLang's ``GenerateReqInput`` fields, token in / token out)::

    {"input_ids": [1, 2, 3] | [[1, 2], [3]],
     "sampling_params": {"n", "temperature", "top_p", "top_k", "max_new_tokens", "ignore_eos",
                         "sampling_seed"},          # all optional, defaults as SamplingParams but
                                                    # max_new_tokens (SGLang's 128, see below)
     "return_logprob": false,
     "prompt_index": 0,                             # rlloom extension, see below
     "response_index": 0}                           # rlloom extension, see below

Every integer (token ids, ``n``, ``top_k``, ``max_new_tokens``, ``sampling_seed``, ``prompt_index``,
``response_index``)
must fit an int64, token ids, seeds and prompt indices must be non-negative, every float must be
finite, and the values must be in :class:`~rlloom.SamplingParams`' ranges; anything else is a
:class:`SchemaError` naming the field. Checks that need the model or the server's limits (the
vocabulary, the context, ``n`` and ``max_new_tokens`` under the server's caps) are the server's
(``rlloom serve``'s door). Without ``max_new_tokens`` a request asks for SGLang's default,
:data:`DEFAULT_MAX_NEW_TOKENS`, which the server shortens to what fits the context
(``GenerateRequest.max_new_tokens_given`` is False).

Answer: one object per sample, ``{"output_ids": [...], "meta_info": {"id", "finish_reason":
{"type": "stop", "matched": id} | {"type": "length", "length": L} | {"type": "abort"}, "prompt_tokens",
"completion_tokens", "output_token_logprobs": [[log_prob, token_id, null], ...]}}`` (log-probs only
with ``return_logprob``); a single prompt with ``n == 1`` gets the object, anything else a list,
prompt-major (prompt i's n samples are consecutive). This is the token core: ``rlloom serve``
adds SGLang's ``text``, ``rid``, stop strings and ids, and ``stream`` around it
(``rlloom_server.sglang_api``), and a client may send ``sampling_params.stop_token_ids``.

``prompt_index`` (rlloom's own field; SGLang has none): the prompt's index in the caller's whole
batch, which keys the randomness of its samples with ``sampling_seed`` as in
:meth:`rlloom.protocols.RolloutEngine.generate` (the i-th prompt of a batched request gets
``prompt_index + i``). So a trainer's prompts give the same samples whichever server, batch or
order serves them. A client talking to SGLang itself leaves it out and sends one
``sampling_seed`` per prompt instead (:func:`sample_seed`).

``response_index`` (rlloom's own field): the index of the request's first sample among its prompt's, which keys
its randomness (sample j is keyed by ``response_index + j``; 0 when absent), so a request for one sample draws what
sample k of a request with ``n > k`` would (a partial rollout resuming or starting one response of a group).

An ``abort`` finish reason (``/pause_generation`` in mode ``abort`` withdrew the sample mid-generation) comes with
the tokens and log-probs generated so far.

``lora_path`` (SGLang's field): the name of a LoRA adapter loaded with ``/load_lora_adapter``
(``{"lora_name", "lora_path": folder}``) to generate with; absent or null: the server's default.
"""

from __future__ import annotations

import math
import uuid
from dataclasses import dataclass
from typing import Any

from rlloom import Completion, SamplingParams

SAMPLING_KEYS = {
    "n": int, "temperature": float, "top_p": float, "top_k": int, "max_new_tokens": int, "ignore_eos": bool,
    "sampling_seed": int,
}
REQUEST_KEYS = ("input_ids", "sampling_params", "return_logprob", "prompt_index", "response_index", "lora_path")
INT64_MAX = 2**63 - 1
DEFAULT_MAX_NEW_TOKENS = 128  # SGLang's default (its SamplingParams.max_new_tokens)


class SchemaError(ValueError):
    """A request or answer that does not follow the schema; the message names the field."""


@dataclass(frozen=True)
class GenerateRequest:
    """A parsed ``/generate`` request: ``prompts`` (token ids), ``sampling`` with ``first_prompt`` =
    the first prompt's index, whether to return log-probs, whether ``input_ids`` was a batch and
    whether the request named ``max_new_tokens`` (else it is :data:`DEFAULT_MAX_NEW_TOKENS`), and the
    LoRA adapter it names (``lora_path``) or None, and the index of its first sample (``response_index``)."""

    prompts: list[list[int]]
    sampling: SamplingParams
    return_logprob: bool
    batched: bool
    max_new_tokens_given: bool = True
    adapter: str | None = None
    response_index: int = 0


def _token_list(value: Any, where: str) -> list[int]:
    if not isinstance(value, list) or not value:
        raise SchemaError(f"{where} must be a non-empty list of token ids")
    if not all(isinstance(token, int) and not isinstance(token, bool) and 0 <= token <= INT64_MAX for token in value):
        raise SchemaError(f"{where} must hold non-negative integer token ids (int64)")
    return value


def _typed(name: str, value: Any, kind: type) -> Any:
    """``value`` as ``kind``: an int within int64, a finite float (an int is taken as a float), a bool."""
    if kind is float and isinstance(value, int) and not isinstance(value, bool):
        value = float(value)
    if kind is not bool and isinstance(value, bool) or not isinstance(value, kind):
        raise SchemaError(f"sampling_params.{name} must be {kind.__name__}, got {value!r}")
    if kind is int and not -INT64_MAX - 1 <= value <= INT64_MAX:
        raise SchemaError(f"sampling_params.{name}={value} does not fit an int64")
    if kind is float and not math.isfinite(value):
        raise SchemaError(f"sampling_params.{name} must be finite, got {value!r}")
    return value


def _index(body: dict, name: str, count: int) -> int:
    """``body[name]`` (0 when absent): a non-negative integer that stays an int64 when ``count - 1`` is added."""
    index = body.get(name, 0)
    if isinstance(index, bool) or not isinstance(index, int) or not 0 <= index <= INT64_MAX - count:
        raise SchemaError(f"{name} must be a non-negative integer (int64 for each prompt), got {index!r}")
    return index


def parse_generate(body: Any) -> GenerateRequest:
    """A ``/generate`` body as a :class:`GenerateRequest`; :class:`SchemaError` naming the field
    that is missing, unknown or of the wrong type or value."""
    if not isinstance(body, dict):
        raise SchemaError("the body must be a JSON object")
    unknown = sorted(set(body) - set(REQUEST_KEYS))
    if unknown:
        raise SchemaError(f"unknown field(s) {unknown}; supported: {list(REQUEST_KEYS)}")
    ids = body.get("input_ids")
    batched = isinstance(ids, list) and bool(ids) and isinstance(ids[0], list)
    prompts = [_token_list(p, f"input_ids[{i}]") for i, p in enumerate(ids)] if batched else [
        _token_list(ids, "input_ids")]
    params = body.get("sampling_params") or {}
    if not isinstance(params, dict):
        raise SchemaError("sampling_params must be a JSON object")
    unknown = sorted(set(params) - set(SAMPLING_KEYS))
    if unknown:
        raise SchemaError(f"unknown sampling_params {unknown}; supported: {sorted(SAMPLING_KEYS)}")
    values = {name: _typed(name, value, SAMPLING_KEYS[name]) for name, value in params.items() if value is not None}
    seed = values.pop("sampling_seed", None)
    if seed is not None and seed < 0:
        raise SchemaError(f"sampling_params.sampling_seed must be a non-negative integer, got {seed}")
    given = "max_new_tokens" in values
    values.setdefault("max_new_tokens", DEFAULT_MAX_NEW_TOKENS)
    return_logprob = False if body.get("return_logprob") is None else body["return_logprob"]
    if not isinstance(return_logprob, bool):
        raise SchemaError(f"return_logprob must be true or false, got {return_logprob!r}")
    try:
        sampling = SamplingParams(**values, seed=seed, first_prompt=_index(body, "prompt_index", len(prompts)))
    except ValueError as error:
        raise SchemaError(str(error).replace("SamplingParams.", "sampling_params.")) from None
    adapter = body.get("lora_path")
    if adapter is not None and (not isinstance(adapter, str) or not adapter):
        raise SchemaError(f"lora_path must name a loaded LoRA adapter (a non-empty string) or be null, got {adapter!r}")
    return GenerateRequest(prompts, sampling, return_logprob, batched, given, adapter,
                           _index(body, "response_index", sampling.n))


FINISHES = {
    "length": lambda tokens: {"type": "length", "length": len(tokens)},
    "stop": lambda tokens: {"type": "stop", "matched": tokens[-1] if tokens else None},
    "abort": lambda _tokens: {"type": "abort", "message": "withdrawn by /pause_generation (mode abort)"},
}
"""``meta_info.finish_reason`` for a :class:`Completion`'s finish reason and the sample's tokens."""


def render_generate(request: GenerateRequest, answers: list[Completion]) -> dict | list[dict]:
    """The answer body for ``request`` given one :class:`Completion` per prompt (see the module doc)."""
    outputs = []
    for prompt, answer in zip(request.prompts, answers):
        for j, tokens in enumerate(answer.token_ids):
            reason = answer.finish_reasons[j]
            meta: dict[str, Any] = {
                "id": uuid.uuid4().hex,
                "finish_reason": FINISHES[reason](tokens),
                "prompt_tokens": len(prompt),
                "completion_tokens": len(tokens),
            }
            if request.return_logprob and answer.log_probs is not None:
                meta["output_token_logprobs"] = [[lp, token, None] for lp, token in zip(answer.log_probs[j], tokens)]
            outputs.append({"output_ids": tokens, "meta_info": meta})
    return outputs[0] if not request.batched and request.sampling.n == 1 else outputs


# ------------------------------------------------------------------------------ client side
def _mix(x: int) -> int:
    """SplitMix64's finaliser on a 64-bit value."""
    x &= 0xFFFFFFFFFFFFFFFF
    x = ((x ^ (x >> 30)) * 0xBF58476D1CE4E5B9) & 0xFFFFFFFFFFFFFFFF
    x = ((x ^ (x >> 27)) * 0x94D049BB133111EB) & 0xFFFFFFFFFFFFFFFF
    return x ^ (x >> 31)


def sample_seed(seed: int, prompt_index: int, copy: int) -> int:
    """A 63-bit seed for sample ``copy`` of prompt ``prompt_index`` of a call seeded ``seed``, for a
    server without ``prompt_index`` (SGLang): distinct for every (prompt, sample) of a call."""
    golden = 0x9E3779B97F4A7C15
    return _mix(_mix(seed ^ (prompt_index * golden)) ^ (copy * golden)) >> 1


def generate_bodies(prompt_ids: list[int], sampling: SamplingParams, seed: int, with_prompt_index: bool,
                    adapter: str | None = None, response_index: int = 0) -> list[dict]:
    """The ``/generate`` bodies asking for ``sampling.n`` samples of one prompt whose index is
    ``sampling.first_prompt``, the first of them sample ``response_index`` (with the LoRA adapter named
    ``adapter``, SGLang's ``lora_path``, when given). An rlloom server gets one body with ``n``, the call's seed,
    ``prompt_index`` and ``response_index`` (when not 0). SGLang gets ``n`` bodies of one sample, each with its
    own :func:`sample_seed`: SGLang gives all ``n`` samples of one request the request's seed."""
    adapted = {} if adapter is None else {"lora_path": adapter}
    params = {"n": sampling.n, "temperature": sampling.temperature, "top_p": sampling.top_p,
              "top_k": sampling.top_k, "max_new_tokens": sampling.max_new_tokens, "ignore_eos": sampling.ignore_eos}
    if sampling.stop_token_ids:
        params["stop_token_ids"] = list(sampling.stop_token_ids)
    if with_prompt_index:
        first = {"response_index": response_index} if response_index else {}
        return [{"input_ids": list(prompt_ids), "sampling_params": {**params, "sampling_seed": seed},
                 "return_logprob": True, "prompt_index": sampling.first_prompt, **first, **adapted}]
    return [{"input_ids": list(prompt_ids), "return_logprob": True, **adapted, "sampling_params": {
        **params, "n": 1, "sampling_seed": sample_seed(seed, sampling.first_prompt, response_index + copy)}}
            for copy in range(sampling.n)]


def merge_completions(parts: list[Completion]) -> Completion:
    """The samples of several completions of one prompt as one, in order."""
    log_probs = None if any(p.log_probs is None for p in parts) else [lp for p in parts for lp in p.log_probs]
    return Completion([ids for p in parts for ids in p.token_ids], log_probs,
                      [reason for p in parts for reason in p.finish_reasons])


def parse_generate_answer(data: Any, n: int) -> Completion:
    """The answer to one of :func:`generate_bodies` as a :class:`Completion`; :class:`SchemaError` when it
    is not ``n`` outputs of the documented shape."""
    outputs = data if isinstance(data, list) else [data]
    if len(outputs) != n:
        raise SchemaError(f"expected {n} output(s), got {len(outputs)}")
    tokens, log_probs, reasons = [], [], []
    for k, output in enumerate(outputs):
        if not isinstance(output, dict) or not isinstance(output.get("meta_info"), dict):
            raise SchemaError(f"output {k} has no meta_info object")
        ids = output.get("output_ids")
        if not isinstance(ids, list) or not all(isinstance(t, int) for t in ids):
            raise SchemaError(f"output {k}: output_ids must be a list of token ids")
        meta = output["meta_info"]
        entries = meta.get("output_token_logprobs")
        if entries is None:
            log_probs = None
        elif log_probs is not None:
            if not isinstance(entries, list) or len(entries) != len(ids) or not all(
                    isinstance(e, list) and len(e) >= 2 and e[1] == t for e, t in zip(entries, ids)):
                raise SchemaError(f"output {k}: output_token_logprobs must be one [log_prob, token_id, ...] per output id")
            log_probs.append([float(e[0]) for e in entries])
        reason = meta.get("finish_reason")
        kind = reason.get("type") if isinstance(reason, dict) else reason
        tokens.append(ids)
        reasons.append(kind if kind in ("length", "abort") else "stop")
    return Completion(tokens, log_probs, reasons)
