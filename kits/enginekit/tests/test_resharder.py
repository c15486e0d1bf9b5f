"""What a weight sync reports: the largest tensor streamed, and on CUDA the measured peak extra memory."""

from __future__ import annotations

import pytest
import torch
from rlloom_enginekit.devices import CudaPeak
from rlloom_enginekit.resharder import InProcessResharder, InProcessResharderConfig
from rlloom_trainer.testing import device_params


class Weights:
    def __init__(self, tensors):
        self.tensors = tensors

    def named_weights(self):
        yield from self.tensors


class Keep:
    def update_weights(self, named_tensors):
        self.received = [(name, tensor.clone()) for name, tensor in named_tensors]


@pytest.mark.parametrize("device", device_params("the peak extra CUDA memory of a sync is measured"))
def test_in_process_sync_reports_the_largest_tensor_and_peak(device):
    tensors = [("a", torch.ones(10, device=device)), ("b", torch.ones(1000, 4, device=device)),
               ("c", torch.ones(3, dtype=torch.float64, device=device))]
    stats = InProcessResharder(InProcessResharderConfig()).sync(Weights(tensors), Keep())
    assert (stats.num_tensors, stats.num_bytes) == (3, 10 * 4 + 4000 * 4 + 3 * 8)
    assert stats.max_tensor_bytes == 4000 * 4
    if not torch.cuda.is_initialized():  # nothing of this process on a GPU: nothing to measure
        assert stats.peak_extra_bytes is None
    if device == "cuda":  # the clones the receiver keeps: at least the three tensors' bytes
        assert stats.peak_extra_bytes >= stats.num_bytes


def test_cuda_peak_is_none_without_a_cuda_context():
    if torch.cuda.is_available() and torch.cuda.is_initialized():
        pytest.skip("this process already uses CUDA")
    with CudaPeak() as peak:
        torch.ones(1000)
    assert peak.extra_bytes is None


@pytest.mark.cuda("a sync's peak measurement resets torch's peak statistics; the process peak survives it")
def test_the_process_peak_survives_a_sync_measurement():
    from rlloom_enginekit.devices import cuda_peak_bytes

    device = torch.device("cuda", torch.cuda.current_device())
    big = torch.empty(256 * 2**20, dtype=torch.uint8, device=device)  # 256 MiB, freed at once
    held = torch.cuda.memory_allocated(device)
    del big
    with CudaPeak() as peak:
        torch.ones(1000, device=device)
    assert torch.cuda.max_memory_allocated(device) < held  # torch's own peak was reset by the block
    assert peak.extra_bytes < 2**20
    allocated, reserved = cuda_peak_bytes(device)
    assert allocated >= held and reserved >= held
