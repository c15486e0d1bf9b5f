"""``rollout=server``'s config schema: the client's servers, timeouts, retries and weight buckets
(``rollout=sglang`` builds one for its own server); torch-free."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import ClassVar

from rlloom.config.limits import Limited
from rlloom.protocols import PlacesInPools


@dataclass
class ServerRolloutConfig(Limited):
    """Generation by running ``rlloom serve`` (or SGLang) servers over HTTP (``rollout=server``).

    - ``urls``: the servers, e.g. ``[http://127.0.0.1:30000]``.
    - ``timeout_s``: longest wait for one request's answer; ``connect_timeout_s``: for a connection.
    - ``retries``: how many times a failed request is sent again (to another server when there is
      one); ``backoff_s``: the wait before the first retry, doubled for each next one.
    - ``max_in_flight``: most requests outstanding from this client over all servers.
    - ``weight_bucket_mb``: most megabytes of tensors per weight-update request.
    - ``down_s``: how long a server that failed a request is passed over while others are up.
    - ``sleep_servers``: ``sleep()`` / ``wake_up()`` release and resume the servers' memory.
    - ``api_key``: sent to every server as ``Authorization: Bearer <api_key>`` (``rlloom serve
      --api-key``); null sends none."""

    section: ClassVar[str] = "rollout"
    limits: ClassVar[dict] = {**dict.fromkeys(("timeout_s", "connect_timeout_s", "max_in_flight", "weight_bucket_mb"),
                                              "> 0"),
                              **dict.fromkeys(("retries", "backoff_s", "down_s"), ">= 0")}

    urls: list[str] = field(default_factory=list)
    timeout_s: float = 600.0
    connect_timeout_s: float = 10.0
    retries: int = 2
    backoff_s: float = 0.5
    max_in_flight: int = 256
    weight_bucket_mb: int = 512
    down_s: float = 30.0
    sleep_servers: bool = True
    api_key: str | None = None

    def starts_with_other_weights(self) -> bool:
        """Always: the servers belong to whoever started them, and may hold any weights
        (:class:`~rlloom.protocols.StartsWithOtherWeights`: a fresh run pushes its own first)."""
        return True

    def adapter_refusal(self, _lora) -> str:
        """``""``: the servers take LoRA adapters through ``/load_lora_adapter``
        (:class:`rlloom_enginekit.lora.TakesAdapters`: ``rlloom serve rollout=vllm rollout.max_lora_rank=R``,
        SGLang started with ``--enable-lora``); a server that cannot answers the first sync saying why."""
        return ""

    def check_other_sections(self, sections: dict) -> None:
        """:func:`check_one_client` (:class:`rlloom.protocols.ChecksOtherSections`)."""
        check_one_client(sections, "rollout=server")

    def __post_init__(self) -> None:
        super().__post_init__()
        if not self.urls:
            raise ValueError("rollout.urls is empty: name at least one server, e.g. rollout.urls=[http://127.0.0.1:30000]")
        for url in self.urls:
            if not str(url).startswith(("http://", "https://")):
                raise ValueError(f"rollout.urls: {url!r} is not an http:// or https:// URL")


def check_one_client(sections: dict, what: str) -> None:
    """ValueError when the launcher places the rollout role in more than one process (a pool of a launcher that
    :class:`~rlloom.protocols.PlacesInPools`, as ``launcher=ray``) while the rollout is ``what``, a client of
    servers started by someone else: each process would be a client pushing its own weights to the same servers,
    each refusing the others' pushes at its next answer. One client spreads its requests over every server it is
    given already."""
    launcher = sections.get("launcher")
    if not isinstance(launcher, PlacesInPools):
        return
    pool = launcher.pool_of("rollout")
    if launcher.pools()[pool] > 1:
        alone = pool != launcher.pool_of("actor")
        fix = f"launcher.resource_pools.{pool}=1" if alone else ("a pool of its own, +launcher.resource_pools."
                                                                  "client=1 +launcher.mapping.rollout=client")
        raise ValueError(f"{what} runs one client, but the rollout's pool {pool!r} has "
                         f"launcher.resource_pools.{pool}={launcher.pools()[pool]} processes; give it one: {fix}")
