"""``agent=gateway``: black-box agents, programs that speak only OpenAI's API, trained through a gateway.

The first time the runner drives an episode with this loop, it starts an HTTP gateway on
``127.0.0.1`` (a free port) on the runner's event loop. Each episode then runs ``agent.command`` as
a process of its own (its own process group, stdout discarded) with the environment

- ``OPENAI_BASE_URL=http://127.0.0.1:<port>/episodes/<episode id>/v1`` and ``OPENAI_API_KEY`` (any
  value is accepted), so an ``openai`` client made with no arguments talks to the episode;
- ``RLLOOM_EPISODE``: the dataset row as JSON, ``{"id", "prompt", "ground_truth", "data_source", "extra"}``.

Routes (a request naming no episode, a malformed id or one not running gets 400 naming it):

- ``POST /episodes/{id}/v1/chat/completions``, or ``POST /v1/chat/completions`` with the header
  ``X-Rlloom-Episode: <id>``: OpenAI's chat completions (:class:`rlloom_server.openai_api.ChatDialect`,
  ``tools`` included). The messages are rendered by the chat template to ids: on an episode's first
  call they are its prompt; later, ids that extend the episode's prompt and response exactly append
  the extra ids (``response_mask`` 0); anything else is a fork (counter ``forks``): a new sample
  begins on the new ids, and the trajectory trained on is the episode's last sample. Then one
  assistant turn is sampled (the run's sampling settings and per-turn seeds, whatever the request
  says about temperature, seed or ``max_tokens``; ``n`` must be 1) and answered. An episode's calls
  are served one at a time. A call after ``agent.max_turns`` calls, or once the response budget is
  spent, gets 409 (the episode ends with ``max_turns`` or ``length``).
- ``POST /episodes/{id}/reward`` with ``{"reward": float, "parts": {name: float}}``: the episode's
  reward (``reward=agent`` trains on it; another reward function scores the sampled text).

At most ``agent.max_concurrent_agents`` programs run at once; the other episodes wait for a slot.
The episode ends when the program exits: ``answer`` (status 0), ``agent_error`` (another status;
the run's first such failure is logged with the last line of the agent's stderr) or
``agent_timeout`` (still running after ``agent.episode_timeout_s``: its process group is killed).
Either way its process group is killed, so nothing it started outlives it, and a call still being
served is cancelled. Every episode's calls go to the run's one rollout engine.
"""

from __future__ import annotations

import asyncio
import json
import logging
import math
import os
import re
import shutil
import signal
import socket
import uuid
from dataclasses import dataclass, field
from typing import Any

from aiohttp import web
from rlloom import Completion
from rlloom.data import PromptRecord
from rlloom.plugins.registry import Registry
from rlloom.protocols import Episode
from rlloom_serverkit.schema import SchemaError

from rlloom_server.app import error_response, read_json
from rlloom_server.config import GatewayConfig
from rlloom_server.openai_api import ChatDialect
from rlloom_server.text import ServedTokenizer

log = logging.getLogger(__name__)

EPISODE_HEADER = "X-Rlloom-Episode"
EPISODE_ID = re.compile(r"[0-9a-f]{32}")
STDERR_TAIL_BYTES = 4096
MAX_BODY_MB = 64


class EpisodeEnded(Exception):
    """The episode takes no more calls."""


@dataclass
class Session:
    """The gateway's side of one running episode: its chat calls so far, the reward the agent posted,
    and the calls being served."""

    episode: Episode
    max_turns: int
    calls: int = 0
    reward: float | None = None
    parts: dict[str, float] = field(default_factory=dict)
    lock: asyncio.Lock = field(default_factory=asyncio.Lock)
    serving: set[asyncio.Future] = field(default_factory=set)

    async def turn(self, ids: list[int]) -> Completion:
        """One chat call whose messages rendered to ``ids`` (module doc): extend or fork, then sample."""
        async with self.lock:
            episode = self.episode
            if self.calls >= self.max_turns and not episode.finished:
                episode.finish("max_turns")
            if episode.finished:
                raise EpisodeEnded(f"the episode is over: its response budget or agent.max_turns={self.max_turns} "
                                   "is spent")
            if self.calls == 0:
                episode.restart(ids)
            elif not episode.extend_to(ids):
                episode.count("forks")
                episode.restart(ids)
            turn = await episode.assistant_turn()
            if turn is None:
                raise EpisodeEnded("the episode is over: the messages leave no room in its response budget")
            self.calls += 1
            return Completion([list(turn.token_ids)], None, [turn.finish_reason])

    async def serve(self, ids: list[int]) -> Completion:
        """:meth:`turn`, cancelled by :meth:`stop`."""
        work = asyncio.ensure_future(self.turn(ids))
        self.serving.add(work)
        try:
            await asyncio.wait({work})
        finally:
            work.cancel()
            self.serving.discard(work)
        if work.cancelled():
            raise EpisodeEnded("the episode ended while this call was being served")
        return work.result()

    async def stop(self) -> None:
        """Cancel the calls being served and wait for them."""
        for work in list(self.serving):
            work.cancel()
        await asyncio.gather(*self.serving, return_exceptions=True)


def parse_reward(body: Any) -> tuple[float, dict[str, float]]:
    """``(reward, parts)`` of a reward request; SchemaError naming the field at fault."""
    if not isinstance(body, dict) or not set(body) <= {"reward", "parts"}:
        raise SchemaError('the body must be {"reward": number, "parts": {name: number}}')
    parts = body.get("parts") or {}
    if not isinstance(parts, dict):
        raise SchemaError("parts must be an object of {name: number}")
    for name, value in [("reward", body.get("reward")), *((f"parts.{k}", v) for k, v in parts.items())]:
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
            raise SchemaError(f"{name} must be a finite number, got {value!r}")
    return float(body["reward"]), {str(k): float(v) for k, v in parts.items()}


class Gateway:
    """The HTTP gateway (module doc) over the running episodes' :class:`Session` s, by episode id."""

    def __init__(self, tokenizer: Any) -> None:
        self.sessions: dict[str, Session] = {}
        self.chat = ChatDialect(ServedTokenizer(tokenizer, len(tokenizer)), "policy")
        self.url = ""
        self._runner: web.AppRunner | None = None

    async def start(self) -> None:
        app = web.Application(client_max_size=MAX_BODY_MB * 2**20)
        app.add_routes([web.post("/episodes/{episode}/v1/chat/completions", self.chat_completions),
                        web.post("/v1/chat/completions", self.chat_completions),
                        web.post("/episodes/{episode}/reward", self.reward)])
        self._runner = web.AppRunner(app, access_log=None)
        await self._runner.setup()
        listening = socket.socket()
        listening.bind(("127.0.0.1", 0))
        await web.SockSite(self._runner, listening).start()
        self.url = f"http://127.0.0.1:{listening.getsockname()[1]}"

    async def close(self) -> None:
        if self._runner is not None:
            await self._runner.cleanup()

    def session(self, request: web.Request) -> Session:
        """The session the request names (URL path, else header); SchemaError naming what is missing."""
        episode = request.match_info.get("episode") or request.headers.get(EPISODE_HEADER)
        if not episode:
            raise SchemaError(f"no episode id: send it in the URL (/episodes/<id>/v1/...) or the {EPISODE_HEADER} "
                              "header; the agent's OPENAI_BASE_URL has it")
        if not EPISODE_ID.fullmatch(episode):
            raise SchemaError(f"malformed episode id {episode[:64]!r}: an id is 32 hex digits")
        if episode not in self.sessions:
            raise SchemaError(f"no running episode {episode}: it never ran or has ended")
        return self.sessions[episode]

    async def chat_completions(self, request: web.Request) -> web.StreamResponse:
        try:
            session = self.session(request)
            parsed, extras = self.chat.parse(await read_json(request))
            if parsed.sampling.n != 1:
                raise SchemaError(f"n={parsed.sampling.n}: an episode is one trajectory, so n must be 1")
            completion = await session.serve(parsed.prompts[0])
        except SchemaError as error:
            return error_response(400, str(error))
        except EpisodeEnded as error:
            return error_response(409, str(error))
        except Exception as error:  # noqa: BLE001 - the engine's failure goes back to the agent
            return error_response(500, f"{type(error).__name__}: {error}")
        return await self.chat.answer(request, parsed, [completion], extras)

    async def reward(self, request: web.Request) -> web.Response:
        try:
            session = self.session(request)
            session.reward, session.parts = parse_reward(await read_json(request))
        except SchemaError as error:
            return error_response(400, str(error))
        return web.json_response({"reward": session.reward, "parts": session.parts})


def agent_environment(url: str, episode_id: str, row: PromptRecord) -> dict[str, str]:
    """The agent process's environment: this process's, and the variables of the module doc."""
    episode = {"id": episode_id, "prompt": row.prompt, "ground_truth": row.ground_truth,
               "data_source": row.data_source, "extra": row.extra}
    return {**os.environ, "OPENAI_BASE_URL": f"{url}/episodes/{episode_id}/v1", "OPENAI_API_KEY": "rlloom-gateway",
            "RLLOOM_EPISODE": json.dumps(episode, default=str)}


async def last_line(stream: asyncio.StreamReader) -> str:
    """The last non-empty line of what ``stream`` gives until it closes (only its tail is kept)."""
    tail = b""
    while chunk := await stream.read(65536):
        tail = (tail + chunk)[-STDERR_TAIL_BYTES:]
    lines = tail.decode(errors="replace").strip().splitlines()
    return lines[-1] if lines else ""


def kill_group(process: asyncio.subprocess.Process) -> None:
    """SIGKILL the process group the agent leads (it and whatever it started)."""
    try:
        os.killpg(process.pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass  # the whole group has already exited


class GatewayLoop:
    """``agent=gateway`` (:class:`~rlloom.protocols.AgentLoop`; module doc)."""

    tools: tuple = ()

    def __init__(self, cfg: GatewayConfig, registry: Registry) -> None:
        if shutil.which(cfg.command[0]) is None:
            raise ValueError(f"agent.command: no program {cfg.command[0]!r} (not on PATH, or not an executable file)")
        self.config = cfg
        self.slots = asyncio.Semaphore(cfg.max_concurrent_agents)
        self.gateway: Gateway | None = None
        self._started: asyncio.Future | None = None
        self._warned = False

    async def run(self, episode: Episode) -> None:
        gateway = await self._gateway(episode.tokenizer)
        episode.count("forks", 0)
        episode_id = uuid.uuid4().hex
        async with self.slots:
            session = gateway.sessions[episode_id] = Session(episode, self.config.max_turns)
            try:
                reason = await self._run_agent(agent_environment(gateway.url, episode_id, episode.row))
            finally:
                del gateway.sessions[episode_id]
                await session.stop()
        episode.finish(reason, session.reward, session.parts)

    async def _gateway(self, tokenizer: Any) -> Gateway:
        """The gateway, started by the first episode (the others wait for it)."""
        if self._started is None:
            self.gateway = Gateway(tokenizer)
            self._started = asyncio.ensure_future(self.gateway.start())
        await asyncio.shield(self._started)
        return self.gateway

    async def _run_agent(self, environment: dict[str, str]) -> str:
        """Run the agent program to its end; the episode's finish reason (module doc)."""
        process = await asyncio.create_subprocess_exec(
            *self.config.command, env=environment, stdin=asyncio.subprocess.DEVNULL,
            stdout=asyncio.subprocess.DEVNULL, stderr=asyncio.subprocess.PIPE, start_new_session=True)
        stderr = asyncio.ensure_future(last_line(process.stderr))
        try:
            await asyncio.wait_for(process.wait(), self.config.episode_timeout_s)
        except TimeoutError:
            return "agent_timeout"
        finally:
            kill_group(process)
            await process.wait()
            line = await stderr
        if process.returncode != 0:
            if not self._warned:
                self._warned = True
                log.warning("agent %s exited with status %d (the run's first failure; every one counts in "
                            "agent/finish_reason/agent_error): %s", self.config.command, process.returncode, line)
            return "agent_error"
        return "answer"

    async def close(self) -> None:
        """Stop the gateway (the runner calls this when it closes)."""
        if self._started is not None:
            await self._started
            await self.gateway.close()
