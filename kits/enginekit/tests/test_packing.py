"""rlloom_enginekit.packing: the padding-free layouts, written out by hand for small batches, and the
token-budget micro-batch cut. (That a model gives the padded numbers on them: rlloom-fsdp's tests.)"""

from __future__ import annotations

import pytest
import torch

from rlloom import Batch
from rlloom_enginekit.packing import micro_batches, pack_rows


def rows(prompts: list[list[int]], responses: list[list[int]], prompt_width: int = 3, response_width: int = 3):
    """A batch of left-padded prompts and right-padded responses (pad id 0) from token lists."""
    def padded(sequences, width, left):
        ids = torch.zeros(len(sequences), width, dtype=torch.long)
        mask = torch.zeros(len(sequences), width, dtype=torch.long)
        for row, tokens in enumerate(sequences):
            span = slice(width - len(tokens), width) if left else slice(0, len(tokens))
            ids[row, span], mask[row, span] = torch.tensor(tokens, dtype=torch.long), 1
        return ids, mask

    prompt_ids, prompt_mask = padded(prompts, prompt_width, left=True)
    response_ids, response_mask = padded(responses, response_width, left=False)
    return Batch({"prompts": prompt_ids, "prompt_mask": prompt_mask, "responses": response_ids,
                  "response_mask": response_mask})


def test_shared_prompt_layout_runs_each_prompt_once():
    # Two rows share prompt [5, 6]; the third has its own prompt [7].
    batch = rows([[5, 6], [5, 6], [7]], [[11, 12, 13], [21], [31, 32]])
    packing = pack_rows(batch, share_prompts=True)
    # One pack (8 tokens < the width cap); units longest first: [5 6 | 11 12 13 | 21] then [7 | 31 32].
    assert packing.input_ids.tolist() == [[5, 6, 11, 12, 13, 21, 7, 31, 32]]
    assert packing.position_ids.tolist() == [[0, 1, 2, 3, 4, 2, 0, 1, 2]]
    # Token 12 is predicted by the state at 11 (slot 2), token 11 by the last prompt token (slot 1);
    # row 1's only token by slot 1 too; row 2's tokens by slots 6 (its prompt) and 7.
    assert packing.predictors.tolist() == [1, 2, 3, 1, 6, 7]
    mask = packing.attention_mask()[0, 0].int()
    assert mask.tolist() == [
        [1, 0, 0, 0, 0, 0, 0, 0, 0],
        [1, 1, 0, 0, 0, 0, 0, 0, 0],
        [1, 1, 1, 0, 0, 0, 0, 0, 0],
        [1, 1, 1, 1, 0, 0, 0, 0, 0],
        [1, 1, 1, 1, 1, 0, 0, 0, 0],
        [1, 1, 0, 0, 0, 1, 0, 0, 0],  # row 1's response sees its prompt, not row 0's response
        [0, 0, 0, 0, 0, 0, 1, 0, 0],
        [0, 0, 0, 0, 0, 0, 1, 1, 0],
        [0, 0, 0, 0, 0, 0, 1, 1, 1],
    ]


def test_packed_layout_repeats_prompts_and_masks_each_sequence():
    batch = rows([[5, 6], [5, 6]], [[11], [21, 22]])
    packing = pack_rows(batch, share_prompts=False)
    assert packing.input_ids.tolist() == [[5, 6, 21, 22, 5, 6, 11]]
    assert packing.position_ids.tolist() == [[0, 1, 2, 3, 0, 1, 2]]
    assert packing.predictors.tolist() == [5, 1, 2]  # row 0's token 11, then row 1's 21 and 22
    mask = packing.attention_mask()[0, 0].int()
    assert mask[6].tolist() == [0, 0, 0, 0, 1, 1, 1]
    assert mask[3].tolist() == [1, 1, 1, 1, 0, 0, 0]


def test_long_groups_are_split_and_packs_hold_twice_the_longest_row(monkeypatch):
    monkeypatch.setattr("rlloom_enginekit.packing.GROUP_WIDTH", 4)
    batch = rows([[5, 6], [5, 6], [7]], [[11, 12], [21, 22], [31]])
    packing = pack_rows(batch, share_prompts=True)
    # Prompt [5 6] + both responses would be 6 > 4 tokens: the group splits, its prompt repeated.
    # Units [5 6 11 12], [5 6 21 22], [7 31]; packs of at most 2 x 4 tokens: [unit 1, unit 2], [unit 3].
    assert packing.input_ids.tolist() == [[5, 6, 11, 12, 5, 6, 21, 22], [7, 31, 0, 0, 0, 0, 0, 0]]
    assert packing.position_ids[0].tolist() == [0, 1, 2, 3, 0, 1, 2, 3]
    assert packing.segments[1].tolist() == [4, 5, -1, -1, -1, -1, -1, -1]
    mask = packing.attention_mask()
    assert bool(mask.any(dim=-1).all())  # every slot, padding included, attends somewhere (no NaN rows)
    assert not bool(mask[0, 0, 6, :4].any())  # the second unit does not see the first


def test_response_states_pick_the_predicting_positions():
    batch = rows([[5, 6]], [[11, 12]])
    packing = pack_rows(batch, share_prompts=True)
    states = torch.arange(4, dtype=torch.float32).view(1, 4, 1)  # state value = slot index
    assert states.flatten(0, 1)[packing.predictors].flatten().tolist() == [1.0, 2.0]


@pytest.mark.parametrize(("field", "mask", "message"), [
    ("prompt_mask", [[1, 0, 1]], "left-padded prompts"),
    ("response_mask", [[0, 1, 1]], "right-padded responses"),
    ("prompt_mask", [[0, 0, 0]], "at least one real prompt token"),
])
def test_masks_outside_the_padding_contract_are_refused(field, mask, message):
    batch = rows([[5, 6, 7]], [[11, 12, 13]])
    batch[field] = torch.tensor(mask)
    with pytest.raises(ValueError, match=message) as error:
        pack_rows(batch, share_prompts=True)
    assert "sequence_layout=padded" in str(error.value) or "prompt token" in str(error.value)


def test_micro_batches_by_rows_and_by_token_budget():
    # Real tokens per row: 3, 4, 2, 5, 1.
    batch = rows([[5, 6], [5, 6], [7], [5, 6], [7]], [[1], [1, 2], [1], [1, 2, 3], []])
    assert [len(micro) for micro in micro_batches(batch, 2, None)] == [2, 2, 1]
    cuts = micro_batches(batch, 2, 7)  # rows ignored: 3+4 | 2+5 | 1
    assert [len(micro) for micro in cuts] == [2, 2, 1]
    cuts = micro_batches(batch, 99, 6)  # 3 | 4+2 | 5+1
    assert [len(micro) for micro in cuts] == [1, 2, 2]
    cuts = micro_batches(batch, 99, 2)  # a row over the budget is a micro-batch of its own
    assert [len(micro) for micro in cuts] == [1, 1, 1, 1, 1]
    torch.testing.assert_close(torch.cat([micro["responses"] for micro in cuts]), batch["responses"])


class ZeroAdvantageInert:
    """A loss function with the NamesInertRows ability (its call is never made here)."""

    def __call__(self, micro_batch, outputs, stats):
        raise AssertionError("not called")

    def inert_rows(self, batch):
        return (batch["advantages"] == 0).all(dim=1)


def test_rows_to_train_leaves_out_inert_rows_and_keeps_one_when_all_are():
    from rlloom_enginekit.packing import rows_to_train

    batch = Batch({"advantages": torch.tensor([[0.0, 0.0], [1.0, 0.0], [0.0, 0.0], [0.0, -2.0]]),
                   "row": torch.arange(4)})
    trained, skipped = rows_to_train(batch, ZeroAdvantageInert())
    assert trained["row"].tolist() == [1, 3] and skipped == 2
    plain, none_skipped = rows_to_train(batch, lambda micro, outputs, stats: None)  # no ability: every row
    assert plain is batch and none_skipped == 0
    all_inert = Batch({"advantages": torch.zeros(3, 2), "row": torch.arange(3)})
    first, skipped = rows_to_train(all_inert, ZeroAdvantageInert())
    assert first["row"].tolist() == [0] and skipped == 2
