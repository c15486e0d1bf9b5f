"""Agent loops (issue 34): trajectories whose ids are exactly what the engine sampled plus the chat
template's tokens for the messages in between; the toolbox's bad inputs; the masked loss; and real
multi-turn training runs on the tiny model (hf rollout, FSDP2 actor)."""

from __future__ import annotations

import asyncio
import subprocess
import sys

import pytest
import rlloom_trainer
import torch
from agent_helpers import EOS, ScriptedEngine, run_tool_loop
from rlloom.data import PromptRecord
from rlloom.plugins.registry import Registry
from rlloom.types import MiniBatchStats, SamplingParams
from rlloom_agentkit.config import AgentConfig
from rlloom_agentkit.episode import TokenEpisode
from rlloom_agentkit.hermes import ToolCall, parse_tool_calls
from rlloom_agentkit.template import TurnTemplate
from rlloom_agentkit.toolbox import Toolbox
from rlloom_agents.config import ToolLoopConfig
from rlloom_agents.loops import ToolLoop
from rlloom_algokit.grpo_config import GRPOConfig
from rlloom_algokit.policy_loss import make_policy_loss_fn
from rlloom_models.tiny import build_tokenizer
from rlloom_trainer.testing import metric_rows, training_rows

CALL = '<tool_call>{"name": "calculator", "arguments": {"expression": "123*456"}}</tool_call>'


@pytest.fixture(scope="module")
def tokenizer():
    return build_tokenizer(4096)


@pytest.fixture(scope="module")
def registry():
    return Registry()


def test_a_trajectory_is_the_sampled_ids_and_the_template_tokens_between_them(tokenizer, registry):
    out, engine = run_tool_loop(tokenizer, registry, [CALL, "The answer is 56088."])
    length = int(out["response_attention_mask"].sum())
    prompt = out["prompts"][0][out["prompt_mask"][0].bool()].tolist()
    response = out["responses"][0, :length].tolist()
    mask = out["response_mask"][0, :length].tolist()
    # independent reconstruction: the whole conversation through the chat template, tokenised once
    messages = [{"role": "system", "content": ""}, {"role": "user", "content": "What is 123*456?"},
                {"role": "assistant", "content": CALL}, {"role": "tool", "content": "56088"},
                {"role": "assistant", "content": "The answer is 56088."}]
    template = TurnTemplate(tokenizer, [EOS])
    rendered = template.render(messages[1:], generation_prompt=False, tools=ToolLoop(ToolLoopConfig(), registry).tools)
    assert prompt + response + tokenizer("\n")["input_ids"] == template.ids(rendered)
    # the mask is 1 exactly on the two sampled turns, each where the engine put it
    first = tokenizer(CALL)["input_ids"] + [EOS]
    second = tokenizer("The answer is 56088.")["input_ids"] + [EOS]
    assert mask == [1] * len(first) + [0] * (length - len(first) - len(second)) + [1] * len(second)
    assert response[: len(first)] == first and response[-len(second):] == second
    assert tokenizer.decode(response[len(first): length - len(second)]) == "\ntool: 56088\nassistant: "
    # the second turn was prompted with exactly the prompt and everything before it
    assert engine.prompts[1] == prompt + response[: length - len(second)]
    # log-probs: the engine's on sampled tokens, 0 elsewhere; ids, mask and log-probs of one length
    log_probs = out["rollout_log_probs"][0, :length].tolist()
    expected = [-(1 + k / 1000) for k in range(len(first))] + [0.0] * (length - len(first) - len(second)) + [
        -(2 + k / 1000) for k in range(len(second))]
    assert log_probs == pytest.approx(expected, abs=1e-6)
    assert out["responses"].shape == out["response_mask"].shape == out["rollout_log_probs"].shape
    assert out["agent_finish_reason"].tolist() == ["answer"] and out["agent_turns"].tolist() == [2]
    metrics = out.meta["metrics"]
    assert metrics["agent/tool_calls"] == 1 and metrics["agent/tool_errors"] == 0


def test_the_response_budget_cuts_the_trajectory_and_ends_it(tokenizer, registry):
    out, _ = run_tool_loop(tokenizer, registry, [CALL, "The answer is 56088."], max_response_tokens=100)
    assert int(out["response_attention_mask"].sum()) <= 100
    assert out["agent_finish_reason"].tolist() == ["length"]
    out, _ = run_tool_loop(tokenizer, registry, [CALL] * 3, max_turns=2)
    assert out["agent_finish_reason"].tolist() == ["max_turns"] and out["agent_turns"].tolist() == [2]


def test_the_policy_loss_has_no_gradient_on_tool_tokens(tokenizer, registry):
    out, _ = run_tool_loop(tokenizer, registry, [CALL, "The answer is 56088."])
    width = out["responses"].shape[1]
    log_probs = torch.randn(1, width, requires_grad=True)
    out["advantages"] = torch.ones(1, width) * out["response_mask"]
    mask = out["response_mask"]
    stats = MiniBatchStats(int(mask.sum()), 1, 1, width)
    loss, _ = make_policy_loss_fn(GRPOConfig(loss_agg_mode="token-mean"))(out, {"log_probs": log_probs}, stats)
    (grad,) = torch.autograd.grad(loss, log_probs)
    inserted = (out["response_attention_mask"] == 1) & (mask == 0)
    assert inserted.sum() > 10
    assert bool((grad[inserted] == 0).all()) and bool((grad[mask.bool()] != 0).all())


def test_a_row_may_name_its_own_loop(tokenizer, registry):
    """In an ``agent=tools`` run, a row whose ``extra["agent"]`` is ``single_turn`` gets one turn, its tool
    call left as text; the other rows run the run's loop."""
    from agent_helpers import prompt_batch
    from rlloom_agentkit.loops import SingleTurn
    from rlloom_agentkit.runner import AgentRunner

    cfg = ToolLoopConfig()
    loops = {"tools": lambda: ToolLoop(cfg, registry), "single_turn": SingleTurn}
    engine = ScriptedEngine(tokenizer, [CALL, CALL, "56088"])
    runner = AgentRunner(engine, TurnTemplate(tokenizer, [EOS]), 256, lambda name: loops[name](), "tools", cfg)
    rows = [PromptRecord([{"role": "user", "content": "What is 123*456?"}], "56088", "t", extra)
            for extra in ({"agent": "single_turn"}, {})]
    try:
        out = runner(prompt_batch(rows), SamplingParams(max_new_tokens=200))
    finally:
        runner.close()
    assert out["agent_turns"].tolist() == [1, 2]
    assert out["agent_finish_reason"].tolist() == ["answer", "answer"]
    assert sorted(runner.loops) == ["single_turn", "tools"]


def test_messages_before_the_first_turn_join_the_prompt(tokenizer):
    engine = ScriptedEngine(tokenizer, ["7"])
    row = PromptRecord([{"role": "user", "content": "Guess."}], 7, "guess_number")
    episode = TokenEpisode(row, engine, TurnTemplate(tokenizer, [EOS]), SamplingParams(max_new_tokens=8), 64, 0)
    assert episode.add_messages([{"role": "user", "content": "From 1 to 9."}])
    assert tokenizer.decode(episode.prompt_ids) == "user: Guess.\nuser: From 1 to 9.\nassistant: "
    assert episode.response_ids == []


# ---------------------------------------------------------------------------------------- tool calls
def test_tool_calls_are_parsed_and_malformed_ones_named():
    assert parse_tool_calls("no call") == []
    assert parse_tool_calls(CALL) == [ToolCall("calculator", {"expression": "123*456"})]
    assert parse_tool_calls('<tool_call>{"name": "c", "arguments": "{\\"x\\": 1}"}</tool_call>') == [
        ToolCall("c", {"x": 1})]
    assert "not valid JSON" in parse_tool_calls("<tool_call>{name: c}</tool_call>")[0].error
    assert "string \"name\"" in parse_tool_calls('<tool_call>{"arguments": {}}</tool_call>')[0].error
    assert "not closed" in parse_tool_calls('<tool_call>{"name": "c"}')[-1].error


class SlowTool:
    name, description = "slow", "sleeps"
    parameters = {"type": "object", "properties": {"seconds": {"type": "number"}}, "required": ["seconds"]}

    async def __call__(self, arguments, row):
        await asyncio.sleep(arguments["seconds"])
        return "x" * 3_000_000  # megabytes


class BrokenTool:
    name, description = "broken", "raises"
    parameters = {"type": "object", "properties": {}}

    async def __call__(self, arguments, row):
        raise OSError("disk on fire")


class FakeEpisode:
    row = PromptRecord("p", None, "t")

    def __init__(self, tokenizer):
        self.tokenizer, self.counters = tokenizer, {}

    def count(self, name, k=1):
        self.counters[name] = self.counters.get(name, 0) + k


def test_every_bad_tool_call_becomes_an_error_observation_and_is_counted(tokenizer):
    box = Toolbox([SlowTool(), BrokenTool()], AgentConfig(tool_timeout_s=0.5, max_parallel_calls=6,
                                                          max_tool_response_tokens=80))
    episode = FakeEpisode(tokenizer)
    calls = [ToolCall(None, error="the tool call is not valid JSON"), ToolCall("nope"),
             ToolCall("slow", {"seconds": "soon"}), ToolCall("slow", {"seconds": 30}), ToolCall("broken"),
             ToolCall("slow", {"seconds": 0}), ToolCall("slow", {"seconds": 0})]
    answers = [m["content"] for m in asyncio.run(box.run(calls, episode))]
    assert answers[0] == "error: the tool call is not valid JSON"
    assert answers[1] == "error: no tool named 'nope'; the tools are broken, slow"
    assert answers[2].startswith("error: invalid arguments for slow: 'soon' is not of type 'number'")
    assert answers[3] == "error: slow did not answer within 0.5 s"
    assert answers[4] == "error: broken failed: OSError: disk on fire"
    assert "[… the middle was cut …]" in answers[5] and len(tokenizer(answers[5])["input_ids"]) < 120
    assert answers[6] == "error: at most 6 tool calls per turn; this one was not run"
    assert episode.counters == {"tool_calls": 7, "tool_errors": 6}


def test_a_tool_whose_schema_does_not_validate_is_refused():
    class BadSchema(BrokenTool):
        parameters = {"type": "object", "properties": {"x": {"type": "numbr"}}}

    with pytest.raises(ValueError, match="tool broken: its parameters are not a valid JSON schema"):
        Toolbox([BadSchema()], AgentConfig())


# ---------------------------------------------------------------------------------------- real runs
@pytest.mark.slow
def test_an_environment_task_trains_multi_turn_on_the_tiny_model(tmp_path):
    final = rlloom_trainer.train([
        "preset=tiny", "agent=environment", "data=guess_number", "reward=agent", "data.high=9", "data.num_val=4",
        "sampling.max_new_tokens=6", "agent.max_response_tokens=64", "agent.max_turns=4", "trainer.total_steps=2",
        "trainer.test_freq=0", f"trainer.run_dir={tmp_path}", "algorithm.ppo_epochs=2"])
    rows = training_rows(metric_rows(str(tmp_path)))
    assert len(rows) == 2
    for row in rows:
        assert row["agent/turns/mean"] > 1.5  # the tiny model never answers right at once: every episode continues
        assert row["agent/response_tokens/mean"] > row["agent/sampled_tokens/mean"]
        # the trainer reads the tool/user tokens in between exactly as the engine did (packed layout)
        assert row["training/rollout_probs_diff_mean"] < 1e-4
    assert "val-core/guess_number/acc/mean@2" in final


@pytest.mark.slow
def test_the_tool_loop_runs_on_the_tiny_model(tmp_path):
    rlloom_trainer.train(["preset=tiny", "agent=tools", "data=arithmetic", "reward=arithmetic",
                          "sampling.max_new_tokens=16", "agent.max_response_tokens=96", "trainer.total_steps=1",
                          "trainer.test_freq=0", "trainer.val_before_train=false", f"trainer.run_dir={tmp_path}"])
    (row,) = training_rows(metric_rows(str(tmp_path)))
    assert row["agent/tool_calls/mean"] >= 0 and row["agent/turns/mean"] >= 1
    assert sum(value for key, value in row.items() if key.startswith("agent/finish_reason/")) == pytest.approx(1)


@pytest.mark.parametrize("overrides, message", [
    (["agent=tools", "agent.tools=[calcuator]"],
     "agent.tools=calcuator: no installed plugin provides tool 'calcuator'. Installed choices: calculator, python, "
     "retrieval. Did you mean 'calculator'?"),
    (["agent=tools", "agent.tools=[]"], "agent.tools=[]: agent=tools needs at least one tool"),
    (["agent=environment", "agent.environment=chess"], "agent.environment=chess: no installed plugin provides "
                                                       "environment 'chess'"),
    (["agent=tools", "agent.max_turns=0"], "agent.max_turns=0: must be >= 1"),
])
def test_bad_agent_settings_exit_2_naming_the_key(overrides, message):
    result = subprocess.run([sys.executable, "-m", "rlloom.cli", "train", "preset=tiny", *overrides],
                            capture_output=True, text=True, timeout=120)
    assert result.returncode == 2, result.stderr
    assert message in result.stderr and "Traceback" not in result.stderr


def test_an_agent_loop_with_a_launcher_that_cannot_run_it_exits_2_before_anything_starts(tmp_path):
    run_dir = tmp_path / "run"
    result = subprocess.run([sys.executable, "-m", "rlloom.cli", "train", "preset=tiny", "agent=tools",
                             "launcher=ray", f"trainer.run_dir={run_dir}"], capture_output=True, text=True, timeout=120)
    assert result.returncode == 2, result.stderr
    assert "agent=tools drives the rollout engine from the trainer's process" in result.stderr
    assert "use launcher=local" in result.stderr and not run_dir.exists()


@pytest.mark.slow
def test_the_calculator_example_short_mode_runs_on_the_tiny_model(tmp_path):
    """``preset=calculator`` (docs/agents.md) in the suite's short mode: the tiny model (byte tokens, so one
    worked example and 2-digit numbers keep the prompt in its 2048 positions), two steps."""
    final = rlloom_trainer.train([
        "preset=calculator", "model=tiny", "model.max_position_embeddings=2048", "data.digits=2", "data.shots=1",
        "data.num_val=4", "data.num_train=16", "trainer.total_steps=2", "trainer.max_prompt_length=1536",
        "sampling.max_new_tokens=8", "agent.max_response_tokens=48", "algorithm.n=2", "trainer.train_batch_size=2",
        "trainer.val_max_prompts=4", "trainer.val_greedy=false", f"trainer.run_dir={tmp_path}"])
    rows = training_rows(metric_rows(str(tmp_path)))
    assert len(rows) == 2 and all("agent/tool_calls/mean" in row for row in rows)
    assert "val-core/calculator/acc/mean@2" in final


GUESS = ["preset=tiny", "agent=environment", "data=guess_number", "reward=agent", "data.high=9", "data.num_val=4",
         "sampling.max_new_tokens=6", "agent.max_response_tokens=64", "agent.max_turns=4", "trainer.test_freq=0",
         "trainer.save_freq=2", "launcher.num_threads=1", "trainer.dump_rollouts=4", "trainer.trackers=[jsonl]"]


@pytest.mark.slow
def test_a_resumed_agent_run_repeats_the_uninterrupted_one(tmp_path):
    """Every turn's request is seeded from the step's seed: a run stopped after its step-2 checkpoint and
    resumed gives the uninterrupted run's records, trajectories and weights, bitwise (CPU, one thread)."""
    from lifecycle_helpers import RLLOOM, metric_rows as comparable, run

    def train(run_dir, steps):
        result = run([str(RLLOOM), "train", *GUESS, f"trainer.total_steps={steps}", f"trainer.run_dir={run_dir}"])
        assert result.returncode == 0, result.stderr[-2000:]

    def records(run_dir):  # the 2-step run validated at its end, step 2: not a difference of the trajectories
        return [{k: v for k, v in row.items() if not k.startswith("val-")} for row in comparable(str(run_dir))]

    train(tmp_path / "straight", 4)
    train(tmp_path / "resumed", 2)
    train(tmp_path / "resumed", 4)
    assert records(tmp_path / "resumed") == records(tmp_path / "straight")
    assert len(records(tmp_path / "straight")) == 5
    for step in (3, 4):
        name = f"rollouts/step_{step}.jsonl"
        assert (tmp_path / "resumed" / name).read_text() == (tmp_path / "straight" / name).read_text()
    assert (tmp_path / "resumed" / "final_model" / "model.safetensors").read_bytes() == (
        tmp_path / "straight" / "final_model" / "model.safetensors").read_bytes()


@pytest.mark.slow
def test_every_trained_sample_carries_the_weight_version_that_sampled_it(tmp_path):
    """Step k samples with the actor after step k - 1 (0: the starting weights), in the dumps of a run
    and of a resumed one alike (the version is restored with the checkpoint)."""
    import json

    rlloom_trainer.train([*GUESS, "trainer.total_steps=3", f"trainer.run_dir={tmp_path}"])
    for step in (1, 2, 3):
        rows = [json.loads(line) for line in (tmp_path / "rollouts" / f"step_{step}.jsonl").read_text().splitlines()]
        assert [row["weight_version"] for row in rows] == [step - 1] * 4
        assert all(row["agent_turns"] >= 1 and row["agent_finish_reason"] for row in rows)
