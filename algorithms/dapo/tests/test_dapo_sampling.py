"""Dynamic sampling's group filter."""

import pytest
import torch

from rlloom import Batch
from rlloom_dapo import varied_groups
from rlloom_dapo.config import DAPOConfig
from rlloom_dapo.sampling import filter_values


def test_groups_with_equal_scores_are_dropped_and_single_samples_kept():
    scores = torch.tensor([0.0, 0.0, 1.0, 0.5, 0.5, 0.5, 1.0, 1.0, 0.25, 0.0, 0.7])
    uids = ["a", "a", "b", "b", "c", "c", "d", "d", "e", "e", "f"]
    kept, dropped = varied_groups(scores, uids)
    # a: all 0, c: all 0.5, d: all 1 → dropped; b and e vary; f has one sample: kept, as verl keeps it.
    assert kept == [[2, 3], [8, 9], [10]]
    assert dropped == 3


def test_groups_are_found_wherever_their_rows_are():
    kept, dropped = varied_groups(torch.tensor([1.0, 2.0, 1.0, 1.0]), [7, 8, 8, 7])
    assert kept == [[1, 2]] and dropped == 1


def test_mismatched_inputs_are_refused():
    with pytest.raises(ValueError, match="need values"):
        varied_groups(torch.zeros(3), ["a", "b"])


def test_the_filter_compares_correctness_not_the_length_shaped_score():
    # One group, all correct, shaped by overlong penalties into [1.0, 1.0, 1.0, 0.5]: varied by
    # score, not by correctness. With acc (the default) it is dropped; with score it is kept.
    batch = Batch({"scores": torch.tensor([1.0, 1.0, 1.0, 0.5]),
                   "reward_correct": torch.tensor([1.0, 1.0, 1.0, 1.0])})
    unshaped = torch.ones(4)
    assert varied_groups(filter_values(batch, "acc", unshaped), ["g"] * 4) == ([], 1)
    assert varied_groups(filter_values(batch, "score", unshaped), ["g"] * 4) == ([[0, 1, 2, 3]], 0)
    # A reward without a "correct" component: acc falls back to the scores before shaping.
    no_components = Batch({"scores": batch["scores"]})
    torch.testing.assert_close(filter_values(no_components, "acc", unshaped), unshaped)


def test_filter_metric_is_validated():
    with pytest.raises(ValueError, match=r"^algorithm\.filter_groups_metric=reward: must be one of acc, score\.$"):
        DAPOConfig(filter_groups_metric="reward")
