"""The CPU layer for megatron-core: it still covers the calls it exists for (fails loudly when an
upgrade moves them), it changes nothing outside the listed modules, and a megatron forward and
backward runs on CPU (the engine tests run whole steps through it)."""

from __future__ import annotations

import importlib
import inspect

import pytest
import torch

from rlloom_megatron import cpu_compat

pytestmark = pytest.mark.skipif(torch.cuda.is_available(), reason="the layer applies only without CUDA")


def test_every_patched_module_still_makes_the_calls_the_layer_redirects():
    """If a megatron-core release stops calling torch.cuda.current_device() (or the CUDA RNG) in a
    listed module, this fails: the list, and the layer, must be revisited for that release."""
    redirected = ("torch.cuda.current_device()", "torch.cuda.get_rng_state", "device='cuda'", 'device="cuda"')
    for name in cpu_compat.PATCHED_MODULES:
        source = inspect.getsource(importlib.import_module(name))
        assert any(call in source for call in redirected), name
    # the optimizers still check parameters by CUDA type name (what cuda_type_names is for)
    for name in ("megatron.core.optimizer.distrib_optimizer", "megatron.core.optimizer.optimizer"):
        assert "== 'torch.cuda.FloatTensor'" in inspect.getsource(importlib.import_module(name)), name
    random = importlib.import_module("megatron.core.tensor_parallel.random")
    assert "_get_cuda_rng_state(" in inspect.getsource(random.CudaRNGStatesTracker.fork)


def test_enable_redirects_only_inside_the_listed_modules():
    assert cpu_compat.enable() and cpu_compat.enable()  # idempotent
    rotary = importlib.import_module(cpu_compat.PATCHED_MODULES[0])
    assert rotary.torch.cuda.current_device() == "cpu"
    assert rotary.torch.float32 is torch.float32 and rotary.torch.cat is torch.cat
    with pytest.raises((AssertionError, RuntimeError)):  # the real torch.cuda is untouched
        torch.cuda.current_device()
    state = torch.get_rng_state()
    rotary.torch.cuda.manual_seed(3)
    first = torch.rand(2)
    torch.set_rng_state(state)
    torch.manual_seed(3)
    assert torch.equal(torch.rand(2), first)  # the CUDA RNG calls act on the CPU generator


def test_factories_in_the_listed_modules_allocate_cuda_requests_on_the_cpu():
    cpu_compat.enable()
    optimizer = importlib.import_module("megatron.core.optimizer.optimizer")
    assert optimizer.torch.tensor([1.0], device="cuda").device.type == "cpu"
    assert optimizer.torch.zeros(2, device=torch.device("cuda", 0)).device.type == "cpu"
    assert optimizer.torch.ones(2, dtype=torch.int).dtype == torch.int  # other arguments unchanged
    with pytest.raises((AssertionError, RuntimeError)):  # the real factories are untouched
        torch.zeros(1, device="cuda")


def test_cuda_type_names_only_inside_the_block():
    cpu_compat.enable()
    param = torch.nn.Parameter(torch.zeros(3))
    with cpu_compat.cuda_type_names():
        assert param.type() == "torch.cuda.FloatTensor"
        assert param.to(torch.bfloat16).type() == "torch.cuda.BFloat16Tensor"
        assert param.type(torch.float64).dtype == torch.float64  # a conversion still converts
    assert param.type() == "torch.FloatTensor"
