"""Overlong reward shaping against hand-computed penalties."""

import pytest
import torch

from rlloom.batch import Batch
from rlloom_dapo import apply_overlong_penalty, overlong_penalty


def test_penalty_is_linear_inside_the_buffer():
    # L_max = 10, L_buf = 4: no penalty up to 6 tokens, then −(len − 6)/4 · 0.5.
    lengths = torch.tensor([0, 5, 6, 7, 8, 10])
    expected = torch.tensor([0.0, 0.0, 0.0, -0.125, -0.25, -0.5])
    torch.testing.assert_close(overlong_penalty(lengths, max_len=10, buffer_len=4, factor=0.5), expected)


def test_buffer_longer_than_the_budget_is_refused():
    with pytest.raises(ValueError, match="overlong_buffer_len must be in \\[1, max_new_tokens=4\\], got 5"):
        overlong_penalty(torch.tensor([1]), max_len=4, buffer_len=5, factor=1.0)


def test_penalty_lands_on_scores_and_the_last_token():
    mask = torch.tensor([[1, 1, 1, 1], [1, 1, 1, 0], [0, 0, 0, 0]])
    token_scores = torch.tensor([[0.0, 0.0, 0.0, 1.0], [0.0, 0.0, 0.5, 0.0], [0.0, 0.0, 0.0, 0.0]])
    batch = Batch({"scores": torch.tensor([1.0, 0.5, 0.0]), "token_level_scores": token_scores,
                   "response_mask": mask}, meta={"max_new_tokens": 4})
    penalty = apply_overlong_penalty(batch, buffer_len=2, factor=1.0)
    # threshold 4 − 2 = 2: length 4 → −1, length 3 → −0.5, length 0 → 0.
    torch.testing.assert_close(penalty, torch.tensor([-1.0, -0.5, 0.0]))
    torch.testing.assert_close(batch["scores"], torch.tensor([0.0, 0.0, 0.0]))
    torch.testing.assert_close(batch["token_level_scores"], torch.zeros(3, 4))
    assert token_scores[0, 3] == 1.0  # the input tensor is not modified in place


def test_batch_without_max_new_tokens_is_refused():
    batch = Batch({"scores": torch.zeros(1), "token_level_scores": torch.zeros(1, 2),
                   "response_mask": torch.ones(1, 2)})
    with pytest.raises(KeyError, match="max_new_tokens"):
        apply_overlong_penalty(batch, buffer_len=1, factor=1.0)
