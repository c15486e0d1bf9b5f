"""What the agent tests share: an engine that "samples" given texts, the prompt batch the trainer builds
for an agent runner, and a run of ``agent=tools`` on them."""

from __future__ import annotations

import torch
from rlloom.batch import Batch
from rlloom.data import PromptRecord
from rlloom.types import Completion, SamplingParams
from rlloom_agentkit.runner import AgentRunner
from rlloom_agentkit.template import TurnTemplate
from rlloom_agents.config import ToolLoopConfig
from rlloom_agents.loops import ToolLoop

EOS = 257  # the tiny byte tokenizer's <eos>, which closes an assistant turn in its chat template


class ScriptedEngine:
    """An AsyncRolloutEngine whose "samples" are given texts (the model's behaviour is not what these tests
    test: the episode, template, tools and runner around it are); log-probs are distinct per token."""

    def __init__(self, tokenizer, turns: list[str]) -> None:
        self.tokenizer, self.turns, self.prompts = tokenizer, list(turns), []

    async def generate_one(self, prompt_ids, sampling):
        self.prompts.append(list(prompt_ids))
        ids = self.tokenizer(self.turns.pop(0), add_special_tokens=False)["input_ids"] + [EOS]
        ids = ids[: sampling.max_new_tokens]
        log_probs = [-(len(self.prompts) + k / 1000) for k in range(len(ids))]
        reason = "stop" if ids[-1] == EOS else "length"
        return Completion(token_ids=[ids], log_probs=[log_probs], finish_reasons=[reason])


def prompt_batch(rows: list[PromptRecord]) -> Batch:
    """The prompt batch of ``rows`` as an agent runner reads it (its object fields; the ids are unused)."""
    ones = torch.ones(len(rows), 1, dtype=torch.long)
    return Batch({"prompts": ones, "prompt_mask": ones.clone()},
                 {"prompt_messages": [r.prompt for r in rows], "ground_truth": [r.ground_truth for r in rows],
                  "data_source": [r.data_source for r in rows], "extra": [r.extra for r in rows],
                  "prompt_text": ["" for _ in rows]})


def run_tool_loop(tokenizer, registry, turns: list[str], question: str = "What is 123*456?", max_new_tokens: int = 200,
                  **settings) -> tuple[Batch, ScriptedEngine]:
    """One trajectory of ``agent=tools`` (``ToolLoopConfig(**settings)``, tools built through ``registry``)
    whose turns are ``turns``, on a one-message prompt asking ``question``; the runner's output and the engine."""
    cfg = ToolLoopConfig(**settings)
    engine = ScriptedEngine(tokenizer, turns)
    runner = AgentRunner(engine, TurnTemplate(tokenizer, [EOS]), 256, lambda name: ToolLoop(cfg, registry),
                         "tools", cfg)
    row = PromptRecord([{"role": "user", "content": question}], None, "agent_test")
    try:
        return runner(prompt_batch([row]), SamplingParams(max_new_tokens=max_new_tokens)), engine
    finally:
        runner.close()
