"""``TokenEpisode``: the :class:`~rlloom.protocols.Episode` the runner hands to an agent loop.

The episode holds the trajectory as the trainer will see it: ``prompt_ids`` (the row's prompt,
rendered once), then ``response_ids`` that only grow. An assistant turn appends the ids the engine
sampled, mask 1, with their log-probs; added messages append the template's ids for them
(:meth:`rlloom_agentkit.template.TurnTemplate.after_turn`), mask 0, log-prob 0. Before the first
sampled token, added messages are rendered into the prompt instead (nothing sampled is re-tokenised
either way). The response never exceeds ``budget`` tokens: a turn that reaches it is cut there and
the episode finished with ``length``; messages that do not fit (with room for one more token) are
not added (the same). A turn that ran out of ``sampling.max_new_tokens`` (``Turn.finish_reason``
``"length"``) leaves the episode open: the loop decides.

A loop that gets whole token sequences instead of messages (the OpenAI gateway: each call's
messages rendered by the chat template) appends with :meth:`TokenEpisode.extend_to`, which takes
only an exact extension of the ids so far; anything else is a fork: :meth:`TokenEpisode.restart`
begins a new sample on the new ids, and the episode's trajectory is its last sample.

Each turn's request carries its own seed, ``turn_seed(seed, t)`` for turn ``t``, so a trajectory
does not depend on what it was batched with, and a resumed run repeats it.
"""

from __future__ import annotations

import dataclasses
import hashlib
from collections.abc import Sequence
from typing import Any

from rlloom.data import PromptRecord
from rlloom.protocols import AsyncRolloutEngine, Tool
from rlloom.types import SamplingParams, Turn
from rlloom_agentkit.template import TurnTemplate


def turn_seed(seed: int, turn: int) -> int:
    """A 63-bit seed for turn ``turn`` of the episode whose seed is ``seed``."""
    return int.from_bytes(hashlib.sha256(f"{seed}/turn/{turn}".encode()).digest()[:8], "little") >> 1


@dataclasses.dataclass
class Outcome:
    """How an episode ended: ``reason`` and, from the loop, ``reward`` and its ``parts``."""

    reason: str
    reward: float | None = None
    parts: dict[str, float] = dataclasses.field(default_factory=dict)


class TokenEpisode:
    """One trajectory (see the module doc). ``seed``: the episode's seed (None: the engine draws)."""

    def __init__(self, row: PromptRecord, engine: AsyncRolloutEngine, template: TurnTemplate,
                 sampling: SamplingParams, budget: int, seed: int | None, tools: Sequence[Tool] = ()) -> None:
        self.row = row
        self.tokenizer = template.tokenizer
        self.engine = engine
        self.template = template
        self.sampling = sampling
        self.budget = budget
        self.seed = seed
        self.tools = tuple(tools)
        self.messages: list[dict[str, Any]] | None = None if isinstance(row.prompt, str) else list(row.prompt)
        self.prompt_ids = template.prompt_ids(row.prompt, self.tools)
        self.response_ids: list[int] = []
        self.mask: list[int] = []
        self.log_probs: list[float] = []
        self.turns = 0
        self.counters: dict[str, int] = {}
        self.outcome: Outcome | None = None
        self.log_probs_known = True  # False once the engine answered a turn without log-probs
        self._closed_turn = True

    @property
    def finished(self) -> bool:
        return self.outcome is not None

    async def assistant_turn(self) -> Turn | None:
        """Contract: :meth:`rlloom.protocols.Episode.assistant_turn`."""
        room = self.budget - len(self.response_ids)
        if self.finished or room <= 0:
            self.finish("length")
            return None
        seed = None if self.seed is None else turn_seed(self.seed, self.turns)
        params = dataclasses.replace(self.sampling, n=1, seed=seed, first_prompt=0)
        answer = await self.engine.generate_one(self.prompt_ids + self.response_ids, params)
        ids = answer.token_ids[0][:room]
        over_budget = len(answer.token_ids[0]) >= room
        stopped = answer.finish_reasons[0] == "stop" and not over_budget
        self.log_probs_known &= answer.log_probs is not None
        self.response_ids += ids
        self.mask += [1] * len(ids)
        self.log_probs += answer.log_probs[0][:room] if answer.log_probs is not None else [0.0] * len(ids)
        self.turns += 1
        self._closed_turn = bool(ids) and ids[-1] == self.template.closing_id
        text = self.tokenizer.decode(ids, skip_special_tokens=True)
        if over_budget:
            self.finish("length")
        return Turn(text=text, token_ids=tuple(ids), finish_reason="stop" if stopped else "length")

    def add_messages(self, messages: list[dict[str, str]]) -> bool:
        """Contract: :meth:`rlloom.protocols.Episode.add_messages`."""
        if self.finished:
            return False
        if not self.response_ids:
            return self._extend_prompt(messages)
        ids = self.template.after_turn(messages, ended_with_closing=self._closed_turn)
        if len(self.response_ids) + len(ids) >= self.budget:  # no room left to answer
            self.finish("length")
            return False
        self.response_ids += ids
        self.mask += [0] * len(ids)
        self.log_probs += [0.0] * len(ids)
        return True

    def _extend_prompt(self, messages: list[dict[str, str]]) -> bool:
        """Messages before the first sampled token: part of the prompt, rendered whole."""
        if self.messages is None:
            raise ValueError("messages cannot follow a plain-string prompt (or a prompt given as ids) before "
                             "the first turn; give the dataset's prompts as chat messages")
        self.messages += messages
        self.prompt_ids = self.template.ids(self.template.render(self.messages, tools=self.tools))
        return True

    def extend_to(self, ids: Sequence[int]) -> bool:
        """Contract: :meth:`rlloom.protocols.Episode.extend_to`."""
        current = self.prompt_ids + self.response_ids
        if self.finished or len(ids) < len(current) or list(ids[: len(current)]) != current:
            return False
        extra = list(ids[len(current):])
        if not self.response_ids:
            self.prompt_ids += extra
        elif len(self.response_ids) + len(extra) >= self.budget:  # no room left to answer
            self.finish("length")
        else:
            self.response_ids += extra
            self.mask += [0] * len(extra)
            self.log_probs += [0.0] * len(extra)
        return True

    def restart(self, prompt_ids: Sequence[int]) -> None:
        """Contract: :meth:`rlloom.protocols.Episode.restart`. ``turns`` goes on counting, so the new
        sample's turns get seeds of their own."""
        self.prompt_ids, self.messages = list(prompt_ids), None
        self.response_ids, self.mask, self.log_probs = [], [], []
        self.log_probs_known, self._closed_turn = True, True

    def count(self, name: str, k: int = 1) -> None:
        """Contract: :meth:`rlloom.protocols.Episode.count`."""
        self.counters[name] = self.counters.get(name, 0) + k

    def finish(self, reason: str, reward: float | None = None, parts: dict[str, float] | None = None) -> None:
        """Contract: :meth:`rlloom.protocols.Episode.finish`."""
        if self.outcome is None:
            self.outcome = Outcome(reason)
        if reward is not None and self.outcome.reward is None:
            self.outcome.reward, self.outcome.parts = reward, dict(parts or {})
