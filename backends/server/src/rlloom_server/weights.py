"""SGLang's weight versions and pausing: ``GET /get_weight_version``, the ``weight_version`` field of
the weight updates, ``POST /pause_generation`` and ``POST /continue_generation``.

- The served weights have a version, a string: ``--weight-version`` at start (SGLang's option,
  default ``"default"``), reported by ``/get_weight_version`` as ``{"weight_version": v}``, by
  ``/get_model_info``, and in every ``/generate`` output's ``meta_info.weight_version``.
- ``/update_weights_from_disk`` and ``/update_weights_from_tensor`` take SGLang's optional
  ``weight_version`` (a non-empty string): the version of the weights they load. Without it the
  version is bumped (:func:`bumped`: ``v`` -> ``v+1`` -> ``v+2``), so that no two different sets of
  weights ever answer under one name. The version changes on the engine's thread, right after the
  weights, between two engine calls.
- ``/pause_generation`` (``{"mode": "abort" | "retract" | "in_place"}``, SGLang's default ``abort``):
  no engine call starts until ``/continue_generation``; requests arriving meanwhile wait (their
  ``--request-timeout-s`` still runs). In mode ``abort`` every request is answered at once, as SGLang's
  abort does: the call running stops its rows within a decode step (over an engine that flags the rows it
  withdrew, the hf engine; another's call runs to its end) and its requests get their tokens and log-probs so
  far, finished by ``abort``; requests queued get no tokens, ``abort``
  (:meth:`rlloom_enginekit.batching.BatchingScheduler.withdraw`). In modes ``retract`` and ``in_place`` the call
  running finishes and the requests queued wait. It answers once the running call has ended, so weights loaded
  next never change under a running call. Weight updates and memory release run while paused.
"""

from __future__ import annotations

import re
from typing import Any

from aiohttp import web
from rlloom_serverkit.schema import SchemaError

PAUSE_MODES = ("abort", "retract", "in_place")
_BUMPED = re.compile(r"^(.*)\+(\d+)$")


def bumped(version: str) -> str:
    """The version after an update that names none: ``"<v>+<k+1>"`` after ``"<v>+<k>"``, else ``"<v>+1"``."""
    match = _BUMPED.match(version)
    return f"{match.group(1)}+{int(match.group(2)) + 1}" if match else f"{version}+1"


def requested_version(body: Any) -> str | None:
    """The optional ``weight_version`` of a weight-update body; SchemaError unless absent, null or a non-empty string."""
    version = body.get("weight_version") if isinstance(body, dict) else None
    if version is not None and (not isinstance(version, str) or not version):
        raise SchemaError(f"weight_version must be a non-empty string, got {version!r}")
    return version


class WeightVersion:
    """The version of the weights being served (module doc); ``current`` is read by the answers."""

    def __init__(self, start: str) -> None:
        self.current = start

    def after_update(self, requested: str | None) -> str:
        """Set the version of weights just loaded: ``requested``, or :func:`bumped` without one."""
        self.current = requested if requested is not None else bumped(self.current)
        return self.current


def routes(server) -> list[web.RouteDef]:
    """``/get_weight_version``, ``/pause_generation``, ``/continue_generation`` of ``server`` (the
    :class:`~rlloom_server.app.RolloutServer`)."""

    async def get_weight_version(_request: web.Request) -> web.Response:
        return web.json_response({"weight_version": server.versions.current})

    async def pause_generation(request: web.Request) -> web.Response:
        try:
            body = await request.json() if request.can_read_body else {}
        except ValueError:
            body = None
        mode = body.get("mode", "abort") if isinstance(body, dict) else None
        if mode not in PAUSE_MODES:
            message = f"the body must be a JSON object whose mode is one of {list(PAUSE_MODES)} (or absent)"
            return web.json_response({"error": {"message": message, "code": 400}}, status=400)
        if mode == "abort":
            server.scheduler.withdraw()
        await server.scheduler.pause()
        return web.json_response({"message": "Generation paused successfully.", "status": "ok"})

    async def continue_generation(_request: web.Request) -> web.Response:
        server.scheduler.resume()
        return web.json_response({"message": "Generation continued successfully.", "status": "ok"})

    return [web.get("/get_weight_version", get_weight_version), web.post("/pause_generation", pause_generation),
            web.post("/continue_generation", continue_generation)]
