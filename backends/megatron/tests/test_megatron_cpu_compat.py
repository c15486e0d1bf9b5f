"""The CPU layer for megatron-core: it is chosen by the engine's device, not by the host (these tests
run on hosts with and without CUDA), it still covers the calls it exists for (fails loudly when an
upgrade moves them), it changes nothing outside the listed modules and is undone when the last
engine goes, and a megatron forward and backward runs on CPU (the engine tests run whole steps
through it)."""

from __future__ import annotations

import importlib
import inspect

import pytest
import torch

from rlloom_megatron import cpu_compat, parallel


@pytest.fixture
def layer():
    """The layer on for the test, off after it (later tests in the process may run megatron on CUDA)."""
    cpu_compat.enable()
    yield
    cpu_compat.disable()


def assert_reaches_cuda(make) -> None:
    """``make()`` (a CUDA allocation through the real torch) goes to CUDA: a CUDA tensor on a host
    with a GPU, torch's refusal on one without."""
    if torch.cuda.is_available():
        assert make().device.type == "cuda"
    else:
        with pytest.raises((AssertionError, RuntimeError)):
            make()


def test_the_layer_is_chosen_by_the_engines_device_not_by_the_host():
    assert cpu_compat.needed(torch.device("cpu")) and cpu_compat.needed("cpu")
    assert not cpu_compat.needed(torch.device("cuda")) and not cpu_compat.needed(torch.device("cuda", 0))


def test_the_first_users_device_holds_the_process_and_the_last_release_undoes_the_layer():
    """parallel.acquire on the CPU turns the layer on (on any host); a user of another device is
    refused while it runs, before anything touches that device; release turns it off again."""
    rotary = importlib.import_module(cpu_compat.PATCHED_MODULES[0])
    random = importlib.import_module("megatron.core.tensor_parallel.random")
    real_helper = random._get_cuda_rng_state
    parallel.acquire(torch.device("cpu"), 1, seed=0)
    try:
        assert cpu_compat.active() and rotary.torch is not torch and random._get_cuda_rng_state is not real_helper
        with pytest.raises(RuntimeError, match=r"a Megatron engine on cuda:0 cannot run beside this process's Megatron "
                                               r"engines on cpu: .* run them in separate processes"):
            parallel.acquire(torch.device("cuda", 0), 1, seed=0)
        parallel.acquire(torch.device("cpu"), 1, seed=0)  # a second engine on the same device joins
        parallel.release()
        assert cpu_compat.active()
    finally:
        parallel.release()
    assert not cpu_compat.active() and rotary.torch is torch and random._get_cuda_rng_state is real_helper
    assert not torch.distributed.is_initialized()


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


def test_enable_redirects_only_inside_the_listed_modules(layer):
    cpu_compat.enable()  # idempotent
    assert cpu_compat.active()
    rotary = importlib.import_module(cpu_compat.PATCHED_MODULES[0])
    assert rotary.torch.cuda.current_device() == "cpu" and not rotary.torch.cuda.is_available()
    assert rotary.torch.float32 is torch.float32 and rotary.torch.cat is torch.cat
    assert_reaches_cuda(lambda: torch.empty(1, device=torch.cuda.current_device()))  # the real torch.cuda is untouched
    state = torch.get_rng_state()
    rotary.torch.cuda.manual_seed(3)
    first = torch.rand(2)
    torch.set_rng_state(state)
    torch.manual_seed(3)
    assert torch.equal(torch.rand(2), first)  # the CUDA RNG calls act on the CPU generator


def test_factories_in_the_listed_modules_allocate_cuda_requests_on_the_cpu(layer):
    optimizer = importlib.import_module("megatron.core.optimizer.optimizer")
    assert optimizer.torch.tensor([1.0], device="cuda").device.type == "cpu"
    assert optimizer.torch.zeros(2, device=torch.device("cuda", 0)).device.type == "cpu"
    assert optimizer.torch.ones(2, dtype=torch.int).dtype == torch.int  # other arguments unchanged
    assert_reaches_cuda(lambda: torch.zeros(1, device="cuda"))  # the real factories are untouched


def test_cuda_type_names_only_inside_the_block(layer):
    param = torch.nn.Parameter(torch.zeros(3))
    with cpu_compat.cuda_type_names():
        assert param.type() == "torch.cuda.FloatTensor"
        assert param.to(torch.bfloat16).type() == "torch.cuda.BFloat16Tensor"
        assert param.type(torch.float64).dtype == torch.float64  # a conversion still converts
    assert param.type() == "torch.FloatTensor"


def test_cuda_type_names_is_an_empty_block_while_the_layer_is_off():
    assert not cpu_compat.active()
    with cpu_compat.cuda_type_names():
        assert torch.nn.Parameter(torch.zeros(3)).type() == "torch.FloatTensor"
