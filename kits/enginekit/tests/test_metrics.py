"""Loss metrics summed over micro-batches: floats and 0-d tensors give the same numbers."""

import torch

from rlloom_enginekit.metrics import add_metrics, read_metric_sums


def test_tensor_and_float_metrics_sum_to_the_same_numbers():
    values = [0.1, 0.2, 0.3, 1e-8, 7.25]
    as_floats, as_tensors = {}, {}
    for value in values:
        add_metrics(as_floats, {"loss": float(torch.tensor(value)), "count": 1.0})
        add_metrics(as_tensors, {"loss": torch.tensor(value), "count": 1.0})
    assert isinstance(as_tensors["loss"], torch.Tensor) and as_tensors["loss"].dtype == torch.float64
    expected = sum(float(torch.tensor(value)) for value in values)
    assert read_metric_sums(as_floats, ["count", "loss"]) == [5.0, expected]
    assert read_metric_sums(as_tensors, ["count", "loss"]) == [5.0, expected]


def test_reading_nothing_held_as_a_tensor():
    assert read_metric_sums({"a": 2.0}, ["a"]) == [2.0]
