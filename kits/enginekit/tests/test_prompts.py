"""The rollout conventions in rlloom_enginekit.prompts: stop ids, pad id, left padding."""

from __future__ import annotations

from types import SimpleNamespace

import pytest
import torch

from rlloom import SamplingParams
from rlloom_enginekit.prompts import check_left_padded, pad_token_id, stop_ids_for, stop_token_ids


def test_stop_ids_merge_the_generation_config_and_the_tokenizer():
    assert stop_token_ids(SimpleNamespace(eos_token_id=[7, 3]), SimpleNamespace(eos_token_id=3)) == [3, 7]
    assert stop_token_ids(SimpleNamespace(eos_token_id=5), SimpleNamespace(eos_token_id=None)) == [5]
    assert stop_token_ids(SimpleNamespace(eos_token_id=None), SimpleNamespace(eos_token_id=None)) == []


def test_a_call_stops_on_the_model_ids_unless_ignored_and_on_its_own_ids_always():
    assert stop_ids_for([2, 7], SamplingParams(stop_token_ids=(9, 2))) == [2, 7, 9]
    assert stop_ids_for([2, 7], SamplingParams(ignore_eos=True, stop_token_ids=(9,))) == [9]
    assert stop_ids_for([2, 7], SamplingParams(ignore_eos=True)) == []


def test_pad_id_prefers_the_tokenizer_then_the_config_then_a_stop_id():
    assert pad_token_id(SimpleNamespace(pad_token_id=2), SimpleNamespace(pad_token_id=9), [4]) == 9
    assert pad_token_id(SimpleNamespace(pad_token_id=2), SimpleNamespace(pad_token_id=None), [4]) == 2
    assert pad_token_id(SimpleNamespace(pad_token_id=None), SimpleNamespace(pad_token_id=None), [4, 6]) == 4
    with pytest.raises(ValueError, match="the model has no pad token"):
        pad_token_id(SimpleNamespace(pad_token_id=None), SimpleNamespace(pad_token_id=None), [])


def test_left_padding_is_checked_row_by_row():
    ids = torch.tensor([[0, 5, 6], [7, 8, 9]])
    check_left_padded(ids, torch.tensor([[0, 1, 1], [1, 1, 1]]))
    with pytest.raises(ValueError, match=r"row\(s\) \[0\] have padding after a real token"):
        check_left_padded(ids, torch.tensor([[1, 0, 1], [1, 1, 1]]))
    with pytest.raises(ValueError, match=r"row\(s\) \[1\] have no real token"):
        check_left_padded(ids, torch.tensor([[0, 1, 1], [1, 1, 0]]))
    with pytest.raises(ValueError, match="must be int64 token ids"):
        check_left_padded(ids.int(), torch.ones(2, 3, dtype=torch.int64))
