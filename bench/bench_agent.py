"""Many agent trajectories at once: tool calls that each sleep 1 s do not add up.

64 trajectories of ``agent=tools`` over 4 turns, each turn followed by one call of a tool that sleeps
1 s, on the tiny model (``model=tiny``, its position table widened to hold the tool instructions)
through the real ``AgentRunner``, ``ToolLoop``, ``Toolbox`` and hf rollout engine (its
``BatchingScheduler``). The tiny random model never writes ``<tool_call>``, so the benchmark's loop
(:class:`EveryTurnCalls`) makes every turn call the tool; everything else is what a run does. The
tool ``sleep`` is registered at runtime, by this module as a plugin (entry point ``bench_agent``),
with its settings (``seconds``) passed as ``agent.tool_settings``.

Measured in the same run: the 64 trajectories at once (``concurrent_s``); the same 64 at once with
a tool that sleeps 0 s (``concurrent_generation_s``: ``concurrent_s`` minus it is what the sleeps
add); the same 64 one at a time, with the tool sleeping 0 s (``sequential_generation_s``: generation
and everything around it, no sleep; these rows name the runner's loop ``instant``). The sequential
time is ``trajectories × turns × seconds`` of sleep plus ``sequential_generation_s``; the ratio is
``concurrent_s`` over it.

    python bench/bench_agent.py                 # 64 trajectories, 4 turns, 1 s per call, 16 new tokens
"""

from __future__ import annotations

import argparse
import asyncio
import dataclasses
import importlib.metadata
import json
import time
from typing import Any

import rlloom
from rlloom import EngineSpec, SamplingParams
from rlloom.data import PromptRecord
from rlloom.plugins.registry import Registry
from rlloom.types import Turn
from rlloom_agentkit.hermes import ToolCall
from rlloom_agentkit.runner import AgentRunner
from rlloom_agentkit.template import TurnTemplate
from rlloom_agents.config import ToolLoopConfig
from rlloom_agents.loops import ToolLoop
from rlloom_enginekit.prompts import model_token_ids
from rlloom_models.config import TinyModelConfig
from rlloom_models.tiny import tiny_model_path
from rlloom_trainer.prompts import PromptEncoder
from transformers import AutoTokenizer

from rlloom_hf import HFRolloutConfig, HFRolloutEngine


@dataclasses.dataclass
class SleepToolConfig:
    """Settings of the tool ``sleep``: how long each call sleeps."""

    seconds: float = 1.0


class SleepTool:
    """A tool whose every call sleeps ``seconds`` on the event loop (as a tool waiting on a server does)."""

    name = "sleep"
    description = "Wait, then say so."
    parameters: dict[str, Any] = {"type": "object", "properties": {}}

    def __init__(self, cfg: SleepToolConfig) -> None:
        self.seconds = cfg.seconds

    async def __call__(self, arguments: dict[str, Any], row: PromptRecord) -> str:
        await asyncio.sleep(self.seconds)
        return f"slept {self.seconds:g} s"


@rlloom.hookimpl
def register_tools(register):
    register("sleep", SleepTool, config=SleepToolConfig)


class EveryTurnCalls(ToolLoop):
    """``agent=tools`` whose every turn calls ``sleep`` once, whatever the model wrote."""

    def calls(self, turn: Turn) -> list[ToolCall]:
        return [ToolCall("sleep", {})]


def build_runner(engine: HFRolloutEngine, model_path: str, args: argparse.Namespace) -> AgentRunner:
    """An agent runner of :class:`EveryTurnCalls` (the tool registered by this module as a plugin next to
    the installed ones): its loop ``sleeps`` (the default) calls a tool that sleeps ``args.seconds``, its
    loop ``instant`` (rows naming it in ``extra["agent"]``) one that sleeps 0 s."""
    plugins = [*importlib.metadata.entry_points(group="rlloom"),
               importlib.metadata.EntryPoint("bench_agent", "bench_agent", "rlloom")]
    registry = Registry(plugins)
    configs = {name: ToolLoopConfig(tools=["sleep"], tool_settings={"sleep": {"seconds": seconds}},
                                    max_turns=args.turns, max_response_tokens=args.turns * (args.max_new_tokens + 64),
                                    max_parallel_calls=1)
               for name, seconds in (("sleeps", args.seconds), ("instant", 0.0))}
    stop_ids, pad_id = model_token_ids(model_path)
    template = TurnTemplate(AutoTokenizer.from_pretrained(model_path), stop_ids)
    return AgentRunner(engine, template, pad_id, lambda name: EveryTurnCalls(configs[name], registry), "sleeps",
                       configs["sleeps"])


def run(runner: AgentRunner, encoder: PromptEncoder, records: list[PromptRecord], sampling: SamplingParams
        ) -> tuple[float, dict[str, float]]:
    """Seconds to make the trajectories of ``records`` at once, and the batch's metrics."""
    start = time.perf_counter()
    out = runner(encoder.encode(records), sampling)
    return time.perf_counter() - start, out.meta["metrics"]


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--trajectories", type=int, default=64)
    parser.add_argument("--turns", type=int, default=4)
    parser.add_argument("--seconds", type=float, default=1.0)
    parser.add_argument("--max-new-tokens", type=int, default=16)
    args = parser.parse_args()
    model_path = tiny_model_path(TinyModelConfig(max_position_embeddings=2048))
    engine = HFRolloutEngine(HFRolloutConfig(max_batch_rows=args.trajectories, device="cpu"),
                             EngineSpec(model_path=model_path, role="rollout", seed=0))
    encoder = PromptEncoder(AutoTokenizer.from_pretrained(model_path), max_prompt_length=2048)
    records = [PromptRecord([{"role": "user", "content": f"Task {i}: wait for the tool."}], None, "bench")
               for i in range(args.trajectories)]
    instant = [dataclasses.replace(record, extra={"agent": "instant"}) for record in records]
    sampling = SamplingParams(n=1, temperature=1.0, max_new_tokens=args.max_new_tokens, seed=1)
    runner = build_runner(engine, model_path, args)
    try:
        run(runner, encoder, instant[:4], sampling)  # warm-up
        concurrent_s, metrics = run(runner, encoder, records, sampling)
        concurrent_generation_s = run(runner, encoder, instant, sampling)[0]
        sequential_generation_s = sum(run(runner, encoder, [record], sampling)[0] for record in instant)
    finally:
        runner.close()
    calls = args.trajectories * args.turns
    assert metrics["agent/tool_calls"] == calls and metrics["agent/tool_errors"] == 0, metrics
    sequential_s = calls * args.seconds + sequential_generation_s
    print(json.dumps({
        "trajectories": args.trajectories, "turns": args.turns, "tool_seconds": args.seconds,
        "max_new_tokens": args.max_new_tokens, "tool_calls": int(metrics["agent/tool_calls"]),
        "concurrent_s": round(concurrent_s, 2), "concurrent_generation_s": round(concurrent_generation_s, 2),
        "sequential_generation_s": round(sequential_generation_s, 2),
        "sequential_s": round(sequential_s, 2), "ratio_concurrent_to_sequential": round(concurrent_s / sequential_s, 4),
        "sampled_tokens_mean": round(metrics["agent/sampled_tokens/mean"], 1),
    }, indent=1))


if __name__ == "__main__":
    main()
