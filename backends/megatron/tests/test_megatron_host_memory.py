"""ParkedStorages frees storages in place and gives them back: views into them (as megatron-core's
DDP parameters and gradients are views of its buffers) see the restored values without re-pointing."""

from __future__ import annotations

import torch

from rlloom_megatron.host_memory import ParkedStorages


def test_views_survive_parking_kept_values_return_dropped_ones_are_zero():
    params = torch.arange(12, dtype=torch.float32)  # a flat buffer, as DDP's parameter buffer
    weight, bias = params[:8].view(2, 4), params[8:]
    grads = torch.full((12,), 3.0)
    main_grad = grads[4:8]
    state = torch.ones(5)
    parked = ParkedStorages(kept=[weight, bias, state], dropped=[main_grad])
    for tensor in (params, weight, bias, grads, main_grad, state):
        assert tensor.untyped_storage().nbytes() == 0  # freed, the shared buffer once
    parked.restore()
    assert torch.equal(weight, torch.arange(8, dtype=torch.float32).view(2, 4))
    assert torch.equal(bias, torch.tensor([8.0, 9.0, 10.0, 11.0]))
    assert torch.equal(state, torch.ones(5))
    assert torch.equal(grads, torch.zeros(12))  # dropped: back as zeros
    weight.add_(1)  # still views of the same buffer
    assert params[0] == 1.0 and params[8] == 8.0
