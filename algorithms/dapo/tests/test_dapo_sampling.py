"""Dynamic sampling's group filter."""

import pytest
import torch

from rlloom_dapo import varied_groups


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
