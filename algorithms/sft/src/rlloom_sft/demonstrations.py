"""From a prompt batch to a training batch: each prompt's demonstration as its response.

The result has the fields a rollout produces (see :mod:`rlloom.batch`), so any train engine trains on
it: the prompt batch's own fields (``prompts`` [B, P] left-padded, ``prompt_mask``, ``uid``, the
objects) plus ``responses`` [B, R] int64 right-padded with the pad id, ``response_mask`` [B, R]
int64 (1 on demonstration tokens, EOS included) and ``response_text`` (the kept tokens decoded,
special tokens skipped), with ``meta["pad_token_id"]``. No ``meta["temperature"]``: the engines
score with T = 1, the model's own distribution.
"""

from __future__ import annotations

from typing import Any

import torch

from rlloom.batch import Batch
from rlloom.config import ConfigError
from rlloom_sft.config import GROUND_TRUTH


def demonstration_texts(prompts: Batch, key: str) -> list[str]:
    """Each row's demonstration: ``extra[key]`` (a string), or ``str(ground_truth)`` when ``key`` is
    ``"ground_truth"``. A row without one raises :class:`~rlloom.config.ConfigError` naming the key,
    the row's data source and the fix (the CLI prints it as one line and exits with status 2)."""
    sources = prompts.get("data_source", [None] * len(prompts))
    if key == GROUND_TRUTH:
        truths = prompts.get("ground_truth", [None] * len(prompts))
        for row, truth in enumerate(truths):
            if truth is None:
                raise ConfigError(
                    f"algorithm.response_key=ground_truth: training prompt {row} of this step (data_source "
                    f"{sources[row]!r}) has no ground truth to train on. Set algorithm.response_key to the key "
                    f"of the prompts' extra that holds the demonstrations (data=files: list that column in "
                    f"data.extra_columns)."
                )
        return [str(truth) for truth in truths]
    texts = []
    for row, extra in enumerate(prompts.get("extra", [{}] * len(prompts))):
        extra = extra if isinstance(extra, dict) else {}
        if key not in extra:
            raise ConfigError(
                f"algorithm.response_key={key}: training prompt {row} of this step (data_source {sources[row]!r}) "
                f"has no demonstration: its extra has no key {key!r} (it has {sorted(extra)}). With data=files "
                f"add the column: data.extra_columns=[{key}]; otherwise set algorithm.response_key to the key "
                f"that holds the demonstrations, or to ground_truth to train on str(ground_truth)."
            )
        if not isinstance(extra[key], str):
            raise ConfigError(
                f"algorithm.response_key={key}: training prompt {row} of this step (data_source {sources[row]!r}) "
                f"has a {type(extra[key]).__name__} under {key!r}; a demonstration must be a string."
            )
        texts.append(extra[key])
    return texts


def demonstration_batch(prompts: Batch, texts: list[str], tokenizer: Any, max_length: int
                        ) -> tuple[Batch, torch.Tensor]:
    """``prompts`` with ``texts`` as responses (fields in the module doc), and ``truncated`` [B] bool.

    Row i's response is ``tokenize(texts[i])`` (no special tokens) followed by the tokenizer's EOS,
    cut to its first ``max_length`` tokens (``truncated[i]``: something was cut, the EOS at least).
    """
    eos, pad = tokenizer.eos_token_id, tokenizer.pad_token_id
    if eos is None or pad is None:
        raise ValueError("algorithm=sft needs a tokenizer with an EOS and a pad token (each demonstration "
                         "ends with EOS; responses are padded with the pad id)")
    full = [ids + [eos] for ids in tokenizer(list(texts), add_special_tokens=False)["input_ids"]]
    truncated = torch.tensor([len(ids) > max_length for ids in full], dtype=torch.bool)
    kept = [ids[:max_length] for ids in full]
    width = max(len(ids) for ids in kept)
    responses = torch.full((len(kept), width), pad, dtype=torch.long)
    mask = torch.zeros((len(kept), width), dtype=torch.long)
    for row, ids in enumerate(kept):
        responses[row, : len(ids)] = torch.tensor(ids, dtype=torch.long)
        mask[row, : len(ids)] = 1
    demonstrations = Batch(
        {"responses": responses, "response_mask": mask},
        {"response_text": tokenizer.batch_decode(kept, skip_special_tokens=True)},
        {"pad_token_id": pad},
    )
    return prompts.union(demonstrations), truncated
