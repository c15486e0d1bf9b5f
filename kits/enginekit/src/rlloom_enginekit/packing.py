"""Padding-free layouts of prompt + response rows for a train engine's forward, micro-batches
cut by a token budget, and the rows a loss needs trained at all.

A rollout batch stores rows padded to the step's widest prompt and response (``prompts`` [B, P]
left-padded, ``responses`` [B, R] right-padded). Responses of very different lengths make most of
that padding, and the n responses of a GRPO group repeat one prompt n times. :func:`pack_rows`
lays the real tokens out without either waste:

- ``shared_prompt``: each distinct prompt once, followed by the real tokens of every response to
  it; a response attends to its prompt and to its own earlier tokens (a tree mask);
- ``packed``: each row's real prompt + response tokens as its own sequence (varlen packing as
  verl and OpenRLHF do; a prompt shared by n rows runs n times).

A unit — one prompt and the responses that follow it — is split (its prompt repeated) only when
longer than ``max(GROUP_WIDTH, longest row)``. Units are placed into packs — rows of a ``[k, W]``
model input — by first-fit decreasing, a pack at most ``max(longest unit, 2 × longest row)``
tokens wide. Attention inside a pack is masked to each sequence (:func:`may_attend`; a
``[k, 1, W, W]`` boolean mask, True = may attend) but computed densely (unless an engine skips the
masked-out blocks, as the fsdp engine's ``attention=flex`` does), so these caps keep the masked-out
work per token within a small multiple of what the padded layout computes, while every linear
layer sees real tokens only. Position ids restart at 0 for each prompt and continue through its
responses, so every token sees exactly the positions and keys it has in the padded layout; the
hidden state predicting response token t is the one at response token t − 1 (the last prompt
token for t = 0). Results equal the padded computation up to floating-point summation order.

Contract: real prompt tokens are a suffix of ``prompt_mask`` (left padding) and real response tokens
a prefix of the response (right padding: :func:`rlloom.batch.response_attention`, which for an agent's
trajectory covers its tool tokens too), as every rollout engine writes them; :func:`pack_rows` raises
a ValueError otherwise. Only tokens with ``response_mask`` 1 get a predictor (are scored).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from rlloom.batch import Batch, response_attention, row_tokens
from rlloom.protocols import LossFn, NamesInertRows
from rlloom_enginekit.choices import GROUP_WIDTH


@dataclass
class Packing:
    """A padding-free model input for one micro-batch (see the module docstring).

    ``input_ids``, ``position_ids`` [k, W]; ``segments`` [k, W]: the sequence each slot holds (−1 on
    the packs' right padding); ``owners`` [k, W]: the prompt sequence a response slot continues (its
    own sequence for prompt slots); ``predictors`` [n]: for each real response token, in row-major
    order of ``response_mask``, the flat index (``pack * W + slot``) of the state that predicts it.
    """

    input_ids: torch.Tensor
    position_ids: torch.Tensor
    segments: torch.Tensor
    owners: torch.Tensor
    predictors: torch.Tensor

    def attention_mask(self) -> torch.Tensor:
        """[k, 1, W, W] bool: :func:`may_attend` for every query slot (rows) and key slot (columns)."""
        slots = torch.arange(self.segments.shape[1], device=self.segments.device)
        return may_attend(self.segments[:, :, None], self.owners[:, :, None], self.segments[:, None, :],
                          slots[:, None], slots[None, :]).unsqueeze(1)


def may_attend(
    query_segment: torch.Tensor, query_owner: torch.Tensor, key_segment: torch.Tensor,
    query_slot: torch.Tensor, key_slot: torch.Tensor,
) -> torch.Tensor:
    """Whether a query slot may attend to a key slot of the same pack (elementwise, broadcasting):
    ``key_slot ≤ query_slot`` and the key holds the query's sequence (``segments``) or the prompt the
    query's response continues (``owners``). Padding slots (segment −1) attend to earlier padding,
    never to tokens; every slot sees at least itself."""
    return (key_slot <= query_slot) & ((query_segment == key_segment) | (query_owner == key_segment))


def real_lengths(micro: Batch) -> tuple[torch.Tensor, torch.Tensor]:
    """``(prompt lengths [b], response lengths [b])``: real tokens per row, checked against the
    padding contract of the module docstring."""
    prompt_mask, response_mask = micro["prompt_mask"], response_attention(micro)
    if bool((prompt_mask[:, 1:] < prompt_mask[:, :-1]).any()):
        raise ValueError("packing needs left-padded prompts (prompt_mask 0…0 1…1 on every row); "
                         "use train_engine.sequence_layout=padded for other masks")
    if bool((response_mask[:, 1:] > response_mask[:, :-1]).any()):
        raise ValueError("packing needs right-padded responses (response tokens 1…1 0…0 on every row); "
                         "use train_engine.sequence_layout=padded for other masks")
    prompt_lengths = prompt_mask.sum(dim=1)
    if bool((prompt_lengths == 0).any()):
        raise ValueError("packing needs at least one real prompt token on every row")
    return prompt_lengths, response_mask.sum(dim=1)


def sequence_units(
    micro: Batch, prompt_lengths: list[int], response_lengths: list[int], share_prompts: bool, width: int
) -> list[tuple[int, list[int]]]:
    """``[(prompt row, response rows)]``: each unit is one prompt and the rows whose responses follow
    it. With ``share_prompts`` the rows of one distinct prompt form units of at most ``width``
    tokens (a longer group is split, its prompt repeated); else every row is its own unit."""
    if not share_prompts:
        return [(row, [row]) for row in range(len(micro))]
    keys = torch.cat([micro["prompts"] * micro["prompt_mask"], micro["prompt_mask"]], dim=1)
    groups: dict[int, list[int]] = {}
    for row, group in enumerate(torch.unique(keys, dim=0, return_inverse=True)[1].tolist()):
        groups.setdefault(group, []).append(row)
    units = []
    for rows in groups.values():
        length, members = prompt_lengths[rows[0]], []
        for row in rows:
            if members and length + response_lengths[row] > width:
                units.append((rows[0], members))
                length, members = prompt_lengths[rows[0]], []
            members.append(row)
            length += response_lengths[row]
        units.append((rows[0], members))
    return units


def first_fit_decreasing(lengths: list[int], width: int) -> list[list[int]]:
    """Indices of ``lengths`` grouped into packs of at most ``width`` (one longer item fills a pack of
    its own): longest first, each into the first pack it fits."""
    packs: list[list[int]] = []
    room: list[int] = []
    for item in sorted(range(len(lengths)), key=lambda index: -lengths[index]):
        pack = next((index for index, free in enumerate(room) if free >= lengths[item]), None)
        if pack is None:
            packs.append([])
            room.append(width)
            pack = len(packs) - 1
        packs[pack].append(item)
        room[pack] -= lengths[item]
    return packs


def pack_rows(micro: Batch, share_prompts: bool) -> Packing:
    """The padding-free input of ``micro`` (fields ``prompts``, ``prompt_mask``, ``responses``,
    ``response_mask``) in the ``shared_prompt`` (``share_prompts``) or ``packed`` layout."""
    prompt_lengths, response_lengths = (lengths.tolist() for lengths in real_lengths(micro))
    longest_row = max(map(sum, zip(prompt_lengths, response_lengths)))
    units = sequence_units(micro, prompt_lengths, response_lengths, share_prompts, max(GROUP_WIDTH, longest_row))
    unit_lengths = [prompt_lengths[prompt] + sum(response_lengths[row] for row in rows) for prompt, rows in units]
    width = max(max(unit_lengths), 2 * longest_row)

    packs = first_fit_decreasing(unit_lengths, width)
    pack_width = max(sum(unit_lengths[unit] for unit in pack) for pack in packs)

    prompt_width = micro["prompts"].shape[1]
    response_width = micro["responses"].shape[1]
    token_table = torch.cat([micro["prompts"].flatten(), micro["responses"].flatten()])
    responses_start = token_table.numel() - micro["responses"].numel()
    shape = (len(packs), pack_width)
    sources = torch.zeros(shape, dtype=torch.long)
    positions = torch.zeros(shape, dtype=torch.long)
    segments = torch.full(shape, -1, dtype=torch.long)
    owners = torch.full(shape, -1, dtype=torch.long)
    predictors = torch.zeros(len(micro), response_width, dtype=torch.long)
    sequence = 0
    for pack_index, pack in enumerate(packs):
        slot = 0
        for unit in pack:
            prompt, rows = units[unit]
            length = prompt_lengths[prompt]
            span = slice(slot, slot + length)
            sources[pack_index, span] = prompt * prompt_width + prompt_width - length + torch.arange(length)
            positions[pack_index, span] = torch.arange(length)
            segments[pack_index, span] = owners[pack_index, span] = prompt_sequence = sequence
            last_prompt_slot = pack_index * pack_width + slot + length - 1
            slot, sequence = slot + length, sequence + 1
            for row in rows:
                count = response_lengths[row]
                if count == 0:
                    continue
                span = slice(slot, slot + count)
                sources[pack_index, span] = responses_start + row * response_width + torch.arange(count)
                positions[pack_index, span] = length + torch.arange(count)
                segments[pack_index, span] = sequence
                owners[pack_index, span] = prompt_sequence
                flat = pack_index * pack_width + slot + torch.arange(count)
                predictors[row, :count] = torch.cat([torch.tensor([last_prompt_slot]), flat[:-1]])
                slot, sequence = slot + count, sequence + 1
    device = micro["prompts"].device
    return Packing(
        input_ids=token_table[sources.to(device)],
        position_ids=positions.to(device),
        segments=segments.to(device),
        owners=owners.to(device),
        predictors=predictors[micro["response_mask"].bool().cpu()].to(device),
    )


def micro_batches(batch: Batch, rows: int, max_tokens: int | None) -> list[Batch]:
    """``batch`` cut into consecutive rows: ``rows`` rows each when ``max_tokens`` is None, else as
    many rows as fit in ``max_tokens`` real tokens (prompt + response, as verl's dynamic batch size
    counts them; a row longer than the budget is a micro-batch of its own). The loss of each is
    its share of the mini-batch loss, so the cut does not change the update."""
    size = len(batch)
    if max_tokens is None:
        return batch.split(rows)
    lengths = row_tokens(batch).tolist()
    micros, start, total = [], 0, 0
    for row, length in enumerate(lengths):
        if row > start and total + length > max_tokens:
            micros.append(batch.slice(start, row))
            start, total = row, 0
        total += length
    micros.append(batch.slice(start, size))
    return micros


def rows_to_train(batch: Batch, loss_fn: LossFn) -> tuple[Batch, int]:
    """``(the rows of batch to run forward and backward, how many were left out)``: without the
    rows ``loss_fn`` names inert (:class:`rlloom.protocols.NamesInertRows`; their gradient is 0),
    in their order. When every row is inert the first one stays, so that each rank still runs the
    loss (its metrics) and a backward that gives every parameter a gradient (zeros: the optimizer
    steps as it would on the full batch)."""
    if not isinstance(loss_fn, NamesInertRows) or len(batch) == 0:
        return batch, 0
    kept = (~loss_fn.inert_rows(batch)).nonzero().squeeze(1)
    if len(kept) == len(batch):
        return batch, 0
    if len(kept) == 0:
        kept = kept.new_zeros(1)
    return batch.reorder(kept), len(batch) - len(kept)
