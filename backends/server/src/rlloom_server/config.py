"""``rlloom serve`` settings (its command-line options); ``rollout=server``'s schema is
:class:`rlloom_serverkit.config.ServerRolloutConfig`."""

from __future__ import annotations

from dataclasses import dataclass


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
