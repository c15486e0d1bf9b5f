"""What ``rlloom serve`` checks of a ``/generate`` request before it reaches a batch, beyond its
schema (:func:`rlloom_serverkit.schema.parse_generate`: types, int64, finite floats, ranges).

With V = the model's vocabulary, C = the context length, and per request n samples of prompts
``p_1 … p_k`` with M = ``max_new_tokens``:

- every token id is < V (an id outside the embedding table fails the whole batch it is in);
- every prompt has at most C - 1 tokens, and prompt + M <= C for the longest (SGLang's rule); a
  request that did not name ``max_new_tokens`` gets min(128, C - longest prompt) instead;
- n <= ``max_n`` and M <= ``max_new_tokens_limit``;
- its token cost, n · Σ_i (len(p_i) + M) (every sample holds its prompt and response), is at most
  ``max_total_tokens``, the budget of tokens in flight (:class:`~rlloom_server.budget.TokenBudget`).

The first three are a :class:`~rlloom_serverkit.schema.SchemaError` (400) naming the field; the
last a :class:`RequestTooLarge` (413) naming the limit. So no engine buffer is sized by an
unchecked ``max_new_tokens``: the hf engine's response buffers are [rows, M] and its static
decoder's cache [rows, prompt + M].
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

from rlloom_serverkit.schema import GenerateRequest, SchemaError

from rlloom_server.config import ServeConfig

_POSITION_KEYS = ("max_position_embeddings", "n_positions", "max_sequence_length", "seq_length")


class RequestTooLarge(Exception):
    """A request whose token cost exceeds the server's whole budget (answered 413)."""


@dataclass(frozen=True)
class Limits:
    """The bounds :func:`admit` checks (see the module doc)."""

    vocab_size: int
    context_length: int
    max_n: int
    max_new_tokens_limit: int
    max_total_tokens: int


def model_sizes(model_path: str, engine: object) -> tuple[int, int | None]:
    """``(vocabulary size, context length)`` of the served model: its (text) config's ``vocab_size``
    and ``max_position_embeddings`` (or ``n_positions``, ``max_sequence_length``, ``seq_length``;
    None when it names none), capped by the engine's ``max_model_len`` where it has one (vLLM's)."""
    from transformers import AutoConfig

    text = AutoConfig.from_pretrained(model_path).get_text_config()
    context = next((getattr(text, key) for key in _POSITION_KEYS if getattr(text, key, None)), None)
    engine_context = getattr(engine, "max_model_len", None)
    if engine_context is not None:
        context = engine_context if context is None else min(context, engine_context)
    return int(text.vocab_size), None if context is None else int(context)


def server_limits(cfg: ServeConfig, model_path: str, engine: object) -> Limits:
    """The :class:`Limits` of ``rlloom serve``'s options over the served model (:func:`model_sizes`):
    ``--context-length`` (default: the model's), ``--max-new-tokens-limit`` (default: the context
    length), ``--max-n``, ``--max-total-tokens``; ValueError when no context length is known."""
    vocab, context = model_sizes(model_path, engine)
    context = cfg.context_length or context
    if context is None:
        raise ValueError(f"the config of {model_path} names no context length ({', '.join(_POSITION_KEYS)}): "
                         "give rlloom serve --context-length")
    return Limits(vocab, context, cfg.max_n, cfg.max_new_tokens_limit or context, cfg.max_total_tokens)


def _check_prompts(request: GenerateRequest, limits: Limits) -> None:
    for i, prompt in enumerate(request.prompts):
        where = f"input_ids[{i}]" if request.batched else "input_ids"
        too_big = max(prompt)
        if too_big >= limits.vocab_size:
            raise SchemaError(f"{where} holds token id {too_big}, outside the model's vocabulary of "
                              f"{limits.vocab_size} ids")
        if len(prompt) >= limits.context_length:
            raise SchemaError(f"{where} has {len(prompt)} tokens; the model's context length is "
                              f"{limits.context_length} (room for at least one new token is needed)")


def admit(request: GenerateRequest, limits: Limits) -> tuple[GenerateRequest, int]:
    """``(request, cost)``: the request checked against ``limits`` (see the module doc), with a
    default ``max_new_tokens`` shortened to fit the context, and its token cost."""
    _check_prompts(request, limits)
    sampling, longest = request.sampling, max(map(len, request.prompts))
    if sampling.n > limits.max_n:
        raise SchemaError(f"sampling_params.n={sampling.n} is over this server's limit of {limits.max_n} (--max-n)")
    new_tokens = sampling.max_new_tokens
    if not request.max_new_tokens_given:
        new_tokens = min(new_tokens, limits.context_length - longest, limits.max_new_tokens_limit)
        request = dataclasses.replace(request, sampling=dataclasses.replace(sampling, max_new_tokens=new_tokens))
    if new_tokens > limits.max_new_tokens_limit:
        raise SchemaError(f"sampling_params.max_new_tokens={new_tokens} is over this server's limit of "
                          f"{limits.max_new_tokens_limit} (--max-new-tokens-limit)")
    if longest + new_tokens > limits.context_length:
        raise SchemaError(f"sampling_params.max_new_tokens={new_tokens} plus the longest prompt ({longest} tokens) "
                          f"exceeds the model's context length of {limits.context_length} tokens")
    cost = sampling.n * sum(len(prompt) + new_tokens for prompt in request.prompts)
    if cost > limits.max_total_tokens:
        raise RequestTooLarge(f"the request needs {cost} tokens (n x (prompt + max_new_tokens) summed over its "
                              f"prompts), over this server's budget of {limits.max_total_tokens} (--max-total-tokens)")
    return request, cost
