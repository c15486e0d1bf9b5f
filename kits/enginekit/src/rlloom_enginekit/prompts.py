"""The prompt and stop-token conventions every rollout engine follows: stop and pad ids from a model's
configs, left-padded prompts checked, turned into token lists and back, and each row's prompt index
(which keys its randomness)."""

from __future__ import annotations

from typing import Any

import torch

from rlloom.batch import PROMPT_INDEX_FIELD, SEED_FIELD, Batch

RESPONSE_INDEX_FIELD = "response_index"
"""[B] int64 prompt-row field of a :class:`rlloom.protocols.BatchesRequests` engine's call: the response index of
the row's first response (its response j is keyed by this + j); 0 when absent. Lets a row with ``n = 1`` draw
what response k of a call with ``n > 1`` would."""

MAX_TOKENS_FIELD = "max_tokens"
"""[B] int64 prompt-row field of a :class:`rlloom.protocols.BatchesRequests` engine's call: the row's own budget,
at most ``sampling.max_new_tokens``; its responses stop there as at ``max_new_tokens``."""


def stop_token_ids(generation_config: Any, tokenizer: Any) -> list[int]:
    """Ids that end a response: the model's ``generation_config.eos_token_id`` (an int or a list)
    together with the tokenizer's ``eos_token_id``, sorted, without duplicates (maybe empty)."""
    ids = generation_config.eos_token_id
    ids = [] if ids is None else [ids] if isinstance(ids, int) else list(ids)
    if tokenizer.eos_token_id is not None:
        ids.append(tokenizer.eos_token_id)
    return sorted(set(ids))


def stop_ids_for(model_stop_ids: list[int], sampling: Any) -> list[int]:
    """The ids that end a response of a call with ``sampling`` (a :class:`~rlloom.types.SamplingParams`):
    the model's ``model_stop_ids`` (none with ``sampling.ignore_eos``) and ``sampling.stop_token_ids``,
    sorted, without duplicates."""
    return sorted(set(() if sampling.ignore_eos else model_stop_ids) | set(sampling.stop_token_ids))


def pad_token_id(generation_config: Any, tokenizer: Any, stop_ids: list[int]) -> int:
    """The id that right-pads responses: the tokenizer's pad token, else the generation config's,
    else the first stop id."""
    for candidate in (tokenizer.pad_token_id, generation_config.pad_token_id):
        if candidate is not None:
            return int(candidate)
    if stop_ids:
        return stop_ids[0]
    raise ValueError("the model has no pad token: neither the tokenizer nor the generation config "
                     "defines pad_token_id or eos_token_id")


def model_token_ids(model_path: str) -> tuple[list[int], int]:
    """``(stop ids, pad id)`` of the Hugging Face folder ``model_path`` (its tokenizer and generation
    config; the model config's ids when it has no ``generation_config.json``), as
    :func:`stop_token_ids` and :func:`pad_token_id` give them: for an engine that runs the model
    elsewhere (a server) and reads its outputs here."""
    from transformers import AutoConfig, AutoTokenizer, GenerationConfig

    tokenizer = AutoTokenizer.from_pretrained(model_path)
    try:
        generation = GenerationConfig.from_pretrained(model_path)
    except OSError:
        generation = GenerationConfig.from_model_config(AutoConfig.from_pretrained(model_path))
    stop_ids = stop_token_ids(generation, tokenizer)
    return stop_ids, pad_token_id(generation, tokenizer, stop_ids)


def check_left_padded(prompt_ids: torch.Tensor, prompt_mask: torch.Tensor) -> None:
    """Raise a ValueError unless ``prompts`` / ``prompt_mask`` are [B, P] with every mask row of the
    form 0…0 1…1 holding at least one 1."""
    if prompt_ids.dim() != 2 or prompt_ids.shape != prompt_mask.shape:
        raise ValueError(f"prompts {tuple(prompt_ids.shape)} and prompt_mask {tuple(prompt_mask.shape)} "
                         "must both be [B, P]")
    if prompt_ids.dtype != torch.long:
        raise ValueError(f"prompts must be int64 token ids, got {prompt_ids.dtype}")
    if len(prompt_mask) == 0:
        return
    bad_value = ~((prompt_mask == 0) | (prompt_mask == 1)).all(dim=1)
    empty = prompt_mask[:, -1] != 1
    not_left = (prompt_mask.diff(dim=1) < 0).any(dim=1)
    for problem, rows in (("values other than 0/1", bad_value), ("no real token (or padding on the right)", empty),
                          ("padding after a real token", not_left)):
        if rows.any():
            raise ValueError(f"prompt_mask must be left-padded; row(s) {rows.nonzero().flatten().tolist()} "
                             f"have {problem}")


def prompt_indices(prompts: Batch, first_prompt: int) -> torch.Tensor:
    """Each row's prompt index [B] int64, which keys the randomness of its responses: the
    :data:`PROMPT_INDEX_FIELD` when the batch has one, else ``first_prompt + row``."""
    if PROMPT_INDEX_FIELD in prompts:
        return prompts[PROMPT_INDEX_FIELD].long()
    return first_prompt + torch.arange(len(prompts), dtype=torch.long)


def row_seeds(prompts: Batch, seed: int) -> torch.Tensor:
    """Each row's seed [B] int64: the :data:`SEED_FIELD` when the batch has one, else ``seed``."""
    if SEED_FIELD in prompts:
        return prompts[SEED_FIELD].long()
    return torch.full((len(prompts),), seed, dtype=torch.long)


def prompt_token_lists(prompt_ids: torch.Tensor, prompt_mask: torch.Tensor) -> list[list[int]]:
    """The real (unpadded) token ids of each row of left-padded ``prompts`` [B, P]."""
    return [row[mask.bool()].tolist() for row, mask in zip(prompt_ids, prompt_mask)]


def left_pad(token_lists: list[list[int]], pad_id: int = 0) -> tuple[torch.Tensor, torch.Tensor]:
    """``(prompts [B, P] int64, prompt_mask [B, P] int64)``: the lists left-padded with ``pad_id`` to
    the longest, P >= 1; the inverse of :func:`prompt_token_lists`. A ValueError for an empty list."""
    if any(len(ids) == 0 for ids in token_lists):
        raise ValueError("a prompt needs at least one token")
    width = max((len(ids) for ids in token_lists), default=1)
    prompts = torch.full((len(token_lists), width), pad_id, dtype=torch.long)
    mask = torch.zeros((len(token_lists), width), dtype=torch.long)
    for row, ids in enumerate(token_lists):
        if ids:
            prompts[row, width - len(ids):] = torch.tensor(ids, dtype=torch.long)
            mask[row, width - len(ids):] = 1
    return prompts, mask
