"""``rollout=sglang`` settings."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import ClassVar, Optional

from rlloom.config.limits import Limited

from rlloom_serverkit.config import ServerRolloutConfig, check_one_client


@dataclass
class SGLangRolloutConfig(Limited):
    """Generation by an SGLang server the run launches or attaches to, or SGLang in process (``rollout=sglang``).

    - ``url``: attach to a running SGLang server instead of launching one (then the launch
      settings below are unused; the server must hold the run's model).
    - ``offline``: run SGLang in this process (``sglang.Engine``, no HTTP) instead of a server;
      weights are then updated from tensors directly.
    - Launch settings (``python -m sglang.launch_server``): ``host``, ``port`` (0: a free one),
      ``tp_size``, ``mem_fraction_static`` (share of GPU memory for weights and KV cache),
      ``dtype``, ``startup_timeout_s`` (longest wait for ``/health``), ``extra_args`` (more flags,
      passed as given).
    - Client settings, as ``rollout=server``: ``timeout_s``, ``retries``, ``backoff_s``,
      ``max_in_flight``, ``sleep_servers`` (``sleep()`` releases the server's GPU memory; the
      launched server gets ``--enable-memory-saver`` for it).
    - ``weights_dir``: where weight syncs write the safetensors folder SGLang reloads from disk
      (None: a temporary folder, removed on close)."""

    section: ClassVar[str] = "rollout"
    limits: ClassVar[dict] = {"tp_size": ">= 1", "mem_fraction_static": "in (0, 1)", "startup_timeout_s": "> 0"}

    url: Optional[str] = None
    offline: bool = False
    host: str = "127.0.0.1"  # launched server: its address
    port: int = 0  # launched server: its port; 0: a free one
    tp_size: int = 1  # launched server: GPUs per model (tensor parallel)
    mem_fraction_static: float = 0.5  # launched server: GPU share for weights and KV cache
    dtype: str = "auto"  # launched server: weight dtype (auto: the model's)
    startup_timeout_s: float = 600.0  # longest wait for the launched server's /health
    extra_args: list[str] = field(default_factory=list)  # more launch flags, passed as given
    timeout_s: float = 600.0  # longest wait for one request's answer, seconds
    retries: int = 2  # times a failed request is sent again
    backoff_s: float = 0.5  # wait before the first retry (doubled for each next)
    max_in_flight: int = 256  # most requests outstanding from this client
    sleep_servers: bool = True  # sleep() releases the server's GPU memory (--enable-memory-saver)
    weights_dir: Optional[str] = None

    def __post_init__(self) -> None:
        super().__post_init__()
        if self.url is not None and not str(self.url).startswith(("http://", "https://")):
            raise ValueError(f"rollout.url={self.url!r} is not an http:// or https:// URL")
        if self.url is not None and self.offline:
            raise ValueError("rollout.url and rollout.offline=true exclude each other: attach to a server, or run "
                             "SGLang in this process")

    def adapter_refusal(self, lora) -> str:
        """Why SGLang would not take the run's LoRA adapters (:class:`rlloom_enginekit.lora.TakesAdapters`):
        ``""`` for an attached server (``url``: started by its owner) or one launched with ``--enable-lora``."""
        if self.url is not None or (not self.offline and "--enable-lora" in self.extra_args):
            return ""
        return (f"starts SGLang without LoRA slots: add rollout.extra_args=[--enable-lora,--max-lora-rank,{lora.rank},"
                "--lora-target-modules,all] (or attach a server started so with rollout.url)")

    def check_other_sections(self, sections: dict) -> None:
        """With ``url``: :func:`rlloom_serverkit.config.check_one_client` (one attached server, one client); a
        launched server belongs to the process that launched it, one per process of the rollout's pool."""
        if self.url is not None:
            check_one_client(sections, "rollout=sglang with rollout.url")

    def starts_with_other_weights(self) -> bool:
        """With ``url``: an attached server may hold any weights, so a fresh run pushes its own first
        (:class:`~rlloom.protocols.StartsWithOtherWeights`); a launched or in-process SGLang loads the run's model."""
        return self.url is not None

    def client_config(self, url: str) -> ServerRolloutConfig:
        """The ``rollout=server`` client settings for one server at ``url``."""
        return ServerRolloutConfig(urls=[url], timeout_s=self.timeout_s, retries=self.retries, backoff_s=self.backoff_s,
                                   max_in_flight=self.max_in_flight, sleep_servers=self.sleep_servers)
