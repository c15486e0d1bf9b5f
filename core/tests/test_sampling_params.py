"""The derived properties of :class:`rlloom.SamplingParams`."""

from __future__ import annotations

import pytest
from rlloom import SamplingParams


def test_policy_temperature_is_one_when_greedy():
    assert SamplingParams(temperature=0.0).policy_temperature == 1.0
    assert SamplingParams(temperature=0.7).policy_temperature == 0.7


def test_filtered_means_top_k_or_top_p_while_sampling():
    assert SamplingParams(top_k=5).filtered and SamplingParams(top_p=0.9).filtered
    assert not SamplingParams().filtered
    assert not SamplingParams(temperature=0.0, top_k=5).filtered  # greedy ignores the filters


def test_stop_token_ids_are_a_tuple_of_token_ids():
    assert SamplingParams(stop_token_ids=(4, 9)).stop_token_ids == (4, 9)
    for bad in ([4], (-1,), (True,), ("4",)):
        with pytest.raises(ValueError, match="stop_token_ids"):
            SamplingParams(stop_token_ids=bad)
