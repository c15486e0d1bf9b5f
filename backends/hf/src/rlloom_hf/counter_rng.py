"""Counter-based random streams: one uniform draw per (seed, prompt, response, token step), computed
with integer tensor ops on the rows' device.

Response ``copy`` of prompt ``prompt`` under ``seed`` owns the SplitMix64 stream keyed by
``key = mix(mix(mix(seed) ^ prompt) ^ copy)``; its draw at token step ``s`` is
``mix(key + s · γ)`` (γ = 0x9E3779B97F4A7C15, ``mix`` = SplitMix64's finaliser), whose top 53 bits
give a uniform double in [0, 1). SplitMix64 (Steele, Lea and Flood, 2014) is this construction:
a Weyl sequence through a strong 64-bit mixer; it passes BigCrush, and distinct keys give streams
that look independent. Unlike one ``torch.Generator`` per row (one kernel launch per row and
token, and not capturable in a CUDA graph), a draw for every row is a handful of element-wise
kernels whatever the number of rows, with no host synchronisation, and a response's draws depend on
(seed, prompt, copy, step) only: not on the other rows, the chunking or the device.

int64 arithmetic wraps modulo 2^64 in PyTorch on every device, which is the unsigned arithmetic
SplitMix64 is defined with; right shifts are made logical with a mask.
"""

from __future__ import annotations

import torch

_MASK64 = (1 << 64) - 1


def _signed(value: int) -> int:
    """The int64 with the same 64 bits as the unsigned ``value``."""
    value &= _MASK64
    return value - (1 << 64) if value >= 1 << 63 else value


GAMMA = _signed(0x9E3779B97F4A7C15)
_C1, _C2 = _signed(0xBF58476D1CE4E5B9), _signed(0x94D049BB133111EB)


def _shift_right(x: torch.Tensor, bits: int) -> torch.Tensor:
    """Logical right shift of int64 ``x`` (as if unsigned)."""
    return (x >> bits) & ((1 << (64 - bits)) - 1)


def mix(x: torch.Tensor) -> torch.Tensor:
    """SplitMix64's finaliser on int64 ``x`` (bit patterns of uint64 values)."""
    x = (x ^ _shift_right(x, 30)) * _C1
    x = (x ^ _shift_right(x, 27)) * _C2
    return x ^ _shift_right(x, 31)


class CounterStreams:
    """The streams of N response rows; :meth:`uniform` draws the next step for every row.

    ``seeds``: the call's seed, or each row's [N] int64; ``prompts`` / ``copies``: [N] int64, each
    row's prompt index in the whole call (``SamplingParams.first_prompt`` + its prompt within the
    batch) and its response index, as for :class:`rlloom_hf.sampling.ResponseStreams`, whose
    interface this shares.
    """

    def __init__(self, seeds: int | torch.Tensor, prompts: torch.Tensor, copies: torch.Tensor,
                 device: torch.device) -> None:
        seeds = _signed(seeds) if isinstance(seeds, int) else seeds
        seed_key = mix(torch.as_tensor(seeds, dtype=torch.int64, device=device))
        prompt_key = mix(seed_key ^ prompts.to(device=device, dtype=torch.int64))
        self.keys = mix(prompt_key ^ copies.to(device=device, dtype=torch.int64))
        self.step = 0

    def uniform(self, dtype: torch.dtype) -> torch.Tensor:
        """The next U[0, 1) draw of every row's stream: [N] (53 random bits, cast to ``dtype``)."""
        bits = mix(self.keys + _signed(self.step * GAMMA))
        self.step += 1
        return (_shift_right(bits, 11).double() * 2.0**-53).to(dtype)
