"""``AgentRunner``: a batch of prompts in, a batch of multi-turn trajectories out — the same call and
output contract as :meth:`rlloom.protocols.RolloutEngine.generate`, so the controller's ``generate``
stage (``Roles.agent_rollout``) and every algorithm take it unchanged.

Each prompt row gets ``sampling.n`` episodes (:class:`~rlloom_agentkit.episode.TokenEpisode`),
interleaved as the batch call's responses are, each driven by the run's agent loop (or the loop the
row names in ``extra["agent"]``). All of them run at once as tasks of one event loop (on a thread of
the runner's own, which lives as long as the runner), so one slow tool call stalls only its own
episode while the others keep the engine busy; the engine batches their turns
(:class:`~rlloom_enginekit.batching.BatchingScheduler`).

Output, for B = rows × n: ``prompts`` / ``prompt_mask`` (each episode's prompt: the row's, with the
loop's tools described), ``responses``, ``response_mask`` (1 on sampled tokens only),
``response_attention_mask`` (1 on every response token), ``rollout_log_probs`` (0 on inserted tokens;
left out when the engine gives none), ``agent_reward`` [B] float32 (the loop's reward, NaN where it
gave none), ``agent_turns`` [B] int64, the object ``agent_finish_reason``, the input's object fields
repeated; ``meta``: ``max_new_tokens`` (the response budget), ``temperature``, ``pad_token_id`` and
``metrics`` (``agent/turns/mean``, ``agent/finish_reason/<reason>`` (fraction of episodes),
``agent/<counter>`` (sum) and ``agent/<counter>/mean`` for every counter a loop or the toolbox kept,
``agent/response_tokens/mean``, ``agent/sampled_tokens/mean``).
"""

from __future__ import annotations

import asyncio
import hashlib
import inspect
import threading
from collections.abc import Callable, Coroutine
from typing import Any

import torch

from rlloom.batch import RESPONSE_ATTENTION_FIELD, Batch
from rlloom.data import PromptRecord
from rlloom.protocols import AgentLoop, AsyncRolloutEngine, Closable, RolloutEngine
from rlloom.types import SamplingParams
from rlloom_agentkit.config import AgentConfig
from rlloom_agentkit.episode import TokenEpisode
from rlloom_agentkit.template import TurnTemplate
from rlloom_enginekit.batching import BatchingScheduler
from rlloom_enginekit.prompts import left_pad

PROMPT_MESSAGES_FIELD = "prompt_messages"
"""Object field of a prompt batch: each row's prompt as its dataset gave it (chat messages or a string)."""


def episode_seed(seed: int | None, row: int, sample: int) -> int | None:
    """Sample ``sample`` of prompt row ``row``'s seed under the call's ``seed`` (None: unseeded)."""
    if seed is None:
        return None
    return int.from_bytes(hashlib.sha256(f"{seed}/{row}/{sample}".encode()).digest()[:8], "little") >> 1


def records(prompts: Batch) -> list[PromptRecord]:
    """The dataset rows behind a prompt batch (its ``prompt_messages``, ``ground_truth``,
    ``data_source`` and ``extra`` fields)."""
    prompts.require(PROMPT_MESSAGES_FIELD)
    return [PromptRecord(prompt, truth, source, dict(extra or {})) for prompt, truth, source, extra in zip(
        prompts[PROMPT_MESSAGES_FIELD], prompts["ground_truth"], prompts["data_source"], prompts["extra"])]


class AgentRunner:
    """See the module doc. ``engine``: the run's rollout engine (wrapped in a BatchingScheduler unless it
    answers ``generate_one`` itself); ``build_loop(name)``: the agent loop registered as ``name`` (the run's
    is ``default``; each is built once, when a row first needs it)."""

    def __init__(self, engine: RolloutEngine, template: TurnTemplate, pad_id: int,
                 build_loop: Callable[[str], AgentLoop], default: str, cfg: AgentConfig) -> None:
        self.engine = engine if isinstance(engine, AsyncRolloutEngine) else BatchingScheduler(engine)
        self.template = template
        self.pad_id = pad_id
        self.build_loop = build_loop
        self.loops: dict[str, AgentLoop] = {}
        self.default = default
        self.config = cfg
        self._events = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._events.run_forever, name="rlloom-agents", daemon=True)
        self._thread.start()

    def __call__(self, prompts: Batch, sampling: SamplingParams) -> Batch:
        episodes = [self.episode(row, sampling, episode_seed(sampling.seed, i, j))
                    for i, row in enumerate(records(prompts)) for j in range(sampling.n)]
        self.run_on_loop(self.drive_all(episodes))
        return self.assemble(prompts, episodes, sampling)

    def episode(self, row: PromptRecord, sampling: SamplingParams, seed: int | None) -> TokenEpisode:
        loop = self.loop_for(row)
        return TokenEpisode(row, self.engine, self.template, sampling, self.config.max_response_tokens, seed,
                            tools=loop.tools)

    def loop_for(self, row: PromptRecord) -> AgentLoop:
        """The loop ``row.extra["agent"]`` names, else the run's."""
        name = row.extra.get("agent", self.default)
        if name not in self.loops:
            self.loops[name] = self.build_loop(name)
        return self.loops[name]

    async def drive_all(self, episodes: list[TokenEpisode]) -> None:
        await asyncio.gather(*(self.drive(episode) for episode in episodes))

    async def drive(self, episode: TokenEpisode) -> None:
        await self.loop_for(episode.row).run(episode)
        episode.finish("answer")  # a loop that returned without finishing answered

    def run_on_loop(self, work: Coroutine[Any, Any, Any]) -> Any:
        return asyncio.run_coroutine_threadsafe(work, self._events).result()

    def assemble(self, prompts: Batch, episodes: list[TokenEpisode], sampling: SamplingParams) -> Batch:
        """The output batch (see the module doc)."""
        out = prompts.repeat(sampling.n)
        out["prompts"], out["prompt_mask"] = left_pad([e.prompt_ids for e in episodes], self.pad_id)
        width = max(len(e.response_ids) for e in episodes)
        shape = (len(episodes), width)
        responses = torch.full(shape, self.pad_id, dtype=torch.long)
        mask, attention = torch.zeros(shape, dtype=torch.long), torch.zeros(shape, dtype=torch.long)
        log_probs = torch.zeros(shape, dtype=torch.float32)
        for row, e in enumerate(episodes):
            length = len(e.response_ids)
            responses[row, :length] = torch.tensor(e.response_ids, dtype=torch.long)
            mask[row, :length] = torch.tensor(e.mask, dtype=torch.long)
            attention[row, :length] = 1
            log_probs[row, :length] = torch.tensor(e.log_probs, dtype=torch.float32)
        out["responses"], out["response_mask"], out[RESPONSE_ATTENTION_FIELD] = responses, mask, attention
        if all(e.log_probs_known for e in episodes):
            out["rollout_log_probs"] = log_probs
        out["agent_reward"] = torch.tensor([float("nan") if e.outcome.reward is None else e.outcome.reward
                                            for e in episodes], dtype=torch.float32)
        out["agent_turns"] = torch.tensor([e.turns for e in episodes], dtype=torch.long)
        out["agent_finish_reason"] = [e.outcome.reason for e in episodes]
        out.meta.update(max_new_tokens=self.config.max_response_tokens, temperature=sampling.policy_temperature,
                        pad_token_id=self.pad_id, metrics=episode_metrics(episodes))
        return out

    def close(self) -> None:
        """Close the loops that hold resources (:class:`~rlloom.protocols.Closable`, their ``close()``
        called on the event loop and awaited when it is async), then stop the event loop's thread (and
        the scheduler this runner made)."""
        for loop in self.loops.values():
            if isinstance(loop, Closable):
                self.run_on_loop(close_on_loop(loop))
        if isinstance(self.engine, BatchingScheduler):
            self.engine.close()
        self.run_on_loop(cancel_others())
        self._events.call_soon_threadsafe(self._events.stop)
        self._thread.join()
        self._events.close()


async def close_on_loop(loop: Closable) -> None:
    """``loop.close()`` on the running event loop, awaited when it returns an awaitable."""
    closing = loop.close()
    if inspect.isawaitable(closing):
        await closing


async def cancel_others() -> None:
    """Cancel every other task of the running loop (an engine's scheduler worker) and wait for them."""
    others = [task for task in asyncio.all_tasks() if task is not asyncio.current_task()]
    for task in others:
        task.cancel()
    await asyncio.gather(*others, return_exceptions=True)


def episode_metrics(episodes: list[TokenEpisode]) -> dict[str, float]:
    """The ``agent/*`` metrics of a batch of finished episodes (see the module doc)."""
    count = len(episodes)
    metrics = {
        "agent/turns/mean": sum(e.turns for e in episodes) / count,
        "agent/response_tokens/mean": sum(len(e.response_ids) for e in episodes) / count,
        "agent/sampled_tokens/mean": sum(sum(e.mask) for e in episodes) / count,
    }
    for reason in sorted({e.outcome.reason for e in episodes}):
        metrics[f"agent/finish_reason/{reason}"] = sum(e.outcome.reason == reason for e in episodes) / count
    for name in sorted({name for e in episodes for name in e.counters}):
        total = sum(e.counters.get(name, 0) for e in episodes)
        metrics[f"agent/{name}"] = float(total)
        metrics[f"agent/{name}/mean"] = total / count
    parts = sorted({name for e in episodes for name in e.outcome.parts})
    for name in parts:
        metrics[f"agent/reward/{name}/mean"] = sum(e.outcome.parts.get(name, 0.0) for e in episodes) / count
    return metrics
