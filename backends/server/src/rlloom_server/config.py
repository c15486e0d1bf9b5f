"""``rlloom serve`` settings (its command-line options) and ``agent=gateway``'s (torch-free);
``rollout=server``'s schema is :class:`rlloom_serverkit.config.ServerRolloutConfig`."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import ClassVar

from rlloom_agentkit.config import AgentConfig


@dataclass
class ServeConfig:
    """- ``max_concurrency``: generate requests served at once; more are refused with 503.
    - ``request_timeout_s``: longest a generate request may take before it is cancelled (504).
    - ``max_batch_prompts``: most prompts in one engine call.
    - ``max_body_mb``: largest request body (weight updates carry whole buckets).
    - ``context_length``: longest prompt + response in tokens; None: the model's
      (:func:`rlloom_server.door.model_sizes`).
    - ``max_n``: most samples one request may ask for.
    - ``max_new_tokens_limit``: most ``max_new_tokens`` one request may ask for; None: the context length.
    - ``max_total_tokens``: the budget of tokens in flight, n x (prompt + max_new_tokens) summed over
      the requests being served; a request waits until its tokens are free, one larger than the
      whole budget gets 413 (:mod:`rlloom_server.door`).
    - ``api_key``: when set, every route but ``/health`` needs ``Authorization: Bearer <api_key>``.
    - ``weight_version``: the version of the weights the server starts with (SGLang's option of that
      name; :mod:`rlloom_server.weights`)."""

    host: str = "127.0.0.1"
    port: int = 30000
    max_concurrency: int = 256
    request_timeout_s: float = 600.0
    max_batch_prompts: int = 64
    max_body_mb: int = 4096
    context_length: int | None = None
    max_n: int = 256
    max_new_tokens_limit: int | None = None
    max_total_tokens: int = 2**22
    api_key: str | None = None
    weight_version: str = "default"


@dataclass
class GatewayConfig(AgentConfig):
    """``agent=gateway`` (:mod:`rlloom_server.gateway`): the shared agent settings (``max_turns``: chat
    calls per episode; ``max_response_tokens``: each sample's response budget; the tool settings
    are unused: the agent's requests bring their own ``tools``), and

    - ``command``: the agent program and its arguments (required), started once per episode;
    - ``episode_timeout_s``: an agent still running after this long is killed (``agent_timeout``);
    - ``max_concurrent_agents``: agent processes running at once; the other episodes wait to start
      theirs (their timeout counts from their start)."""

    limits: ClassVar[dict[str, str]] = {"episode_timeout_s": "in (0, inf)", "max_concurrent_agents": ">= 1"}

    command: list[str] = field(default_factory=list)
    episode_timeout_s: float = 300.0
    max_concurrent_agents: int = 64

    def __post_init__(self) -> None:
        super().__post_init__()
        if not self.command:
            raise ValueError("agent.command=[]: agent=gateway needs the agent program and its arguments, e.g. "
                             "'agent.command=[python,my_agent.py]'")
