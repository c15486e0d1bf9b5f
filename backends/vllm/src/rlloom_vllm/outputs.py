"""Between rlloom's tensors and vLLM's token-id prompts and request outputs.

Log-probs: the engine runs with ``logprobs_mode="processed_logprobs"`` and asks for the sampled
token's log-prob only (``logprobs=0``). vLLM then reports ``log_softmax(logits / T)`` of the sampled
token (``log_softmax(logits)`` when greedy), which is rlloom's ``rollout_log_probs`` contract as long
as top-k and top-p are off. With top-k or top-p on, vLLM would report the log-prob under the
filtered, renormalised distribution instead (higher than the contract's by ``-log`` of the kept
mass), and no ``logprobs_mode`` gives the tempered, unfiltered one: the engine then asks for no
log-probs and leaves ``rollout_log_probs`` out.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
from rlloom import Completion


def request_seeds(seed: int, count: int) -> list[int]:
    """``count`` distinct 32-bit seeds derived from ``seed`` (numpy ``SeedSequence``), one per
    request: vLLM draws each request's noise from its own seed, so giving every prompt the call's
    seed would correlate the samples of different prompts."""
    return [int(s) for s in np.random.SeedSequence(seed).generate_state(count)]


def completion_of(outputs: Sequence[Any], n: int, with_log_probs: bool = True) -> Completion:
    """One prompt's vLLM ``RequestOutput``s (one request of ``n`` samples, or ``n`` requests of one)
    as a :class:`~rlloom.Completion`: the samples in order, their log-probs (None unless
    ``with_log_probs``), ``"length"`` or ``"stop"`` from vLLM's finish reason. A RuntimeError when
    vLLM returned other than ``n`` samples, or a sampled token without its log-prob."""
    samples = [c for output in outputs for c in sorted(output.outputs, key=lambda c: c.index)]
    if len(samples) != n:
        raise RuntimeError(f"vLLM returned {len(samples)} completions for a prompt, expected n={n}")
    log_probs = None
    if with_log_probs:
        if any(c.logprobs is None or len(c.logprobs) != len(c.token_ids) for c in samples):
            raise RuntimeError("vLLM returned no log-prob for some sampled tokens (SamplingParams.logprobs unset?)")
        log_probs = [[step[token].logprob for token, step in zip(c.token_ids, c.logprobs)] for c in samples]
    return Completion(token_ids=[list(c.token_ids) for c in samples], log_probs=log_probs,
                      finish_reasons=["length" if c.finish_reason == "length" else "stop" for c in samples])
