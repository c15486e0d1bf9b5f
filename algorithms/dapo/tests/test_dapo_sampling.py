"""Dynamic sampling's group filter and the padding concat of generation rounds."""

import pytest
import torch

from rlloom.batch import Batch
from rlloom_dapo import concat_padded, varied_groups


def test_groups_with_equal_scores_are_dropped():
    scores = torch.tensor([0.0, 0.0, 1.0, 0.5, 0.5, 0.5, 1.0, 1.0, 0.25, 0.0, 0.7])
    uids = ["a", "a", "b", "b", "c", "c", "d", "d", "e", "e", "f"]
    kept, dropped = varied_groups(scores, uids)
    # a: all 0, c: all 0.5, d: all 1, f: one sample → dropped; b and e vary.
    assert kept == [[2, 3], [8, 9]]
    assert dropped == 4


def test_groups_are_found_wherever_their_rows_are():
    kept, dropped = varied_groups(torch.tensor([1.0, 2.0, 1.0, 1.0]), [7, 8, 8, 7])
    assert kept == [[1, 2]] and dropped == 1


def test_mismatched_inputs_are_refused():
    with pytest.raises(ValueError, match="need scores"):
        varied_groups(torch.zeros(3), ["a", "b"])


def test_concat_pads_prompts_left_and_responses_right():
    first = Batch(
        {"prompts": torch.tensor([[5, 6]]), "prompt_mask": torch.tensor([[1, 1]]),
         "responses": torch.tensor([[7]]), "response_mask": torch.tensor([[1]]), "scores": torch.tensor([0.5])},
        {"uid": ["x"]},
    )
    second = Batch(
        {"prompts": torch.tensor([[1, 2, 3]]), "prompt_mask": torch.tensor([[0, 1, 1]]),
         "responses": torch.tensor([[8, 9, 4]]), "response_mask": torch.tensor([[1, 1, 0]]),
         "scores": torch.tensor([1.0])},
        {"uid": ["y"]},
    )
    out = concat_padded([first, second])
    assert out["prompts"].tolist() == [[0, 5, 6], [1, 2, 3]]
    assert out["prompt_mask"].tolist() == [[0, 1, 1], [0, 1, 1]]
    assert out["responses"].tolist() == [[7, 0, 0], [8, 9, 4]]
    assert out["response_mask"].tolist() == [[1, 0, 0], [1, 1, 0]]
    assert out["scores"].tolist() == [0.5, 1.0] and list(out["uid"]) == ["x", "y"]
