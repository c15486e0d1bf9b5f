"""``agent=gateway`` (issue 34, item 6): black-box agent programs, in processes of their own, that speak
only OpenAI's API through the gateway (the real aiohttp server, the real ``openai`` client, real
processes). A call's messages that re-render to an exact extension of the episode's ids extend it,
anything else forks it; bad requests get 400 naming what is wrong; failing and hanging agents are
counted and the batch goes on; and the example agent trains on the tiny model, on exactly the ids
the engine generated."""

from __future__ import annotations

import json
import logging
import os
import pathlib
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request

import pytest

openai = pytest.importorskip("openai", reason="needs the real OpenAI client (scripts/bootstrap.sh installs it)")

import rlloom_trainer
from rlloom.data import PromptRecord
from rlloom.plugins.registry import Registry
from rlloom.types import SamplingParams
from rlloom_agentkit.runner import AgentRunner
from rlloom_agentkit.template import TurnTemplate
from rlloom_hf.engine import HFRolloutEngine
from rlloom_models.tiny import build_tokenizer
from rlloom_server.config import GatewayConfig
from rlloom_server.gateway import GatewayLoop
from rlloom_trainer.testing import metric_rows, training_rows

from agent_helpers import EOS, ScriptedEngine, prompt_batch

ROOT = pathlib.Path(__file__).resolve().parents[1]
AGENT = [sys.executable, str(ROOT / "tests" / "gateway_agent.py")]
EXAMPLE = [sys.executable, str(ROOT / "examples" / "agents" / "blackbox_calculator.py")]
QUESTION = {"role": "user", "content": "What is 2+2?"}
FOLLOW_UP = {"role": "user", "content": "Are you sure?"}


@pytest.fixture(scope="module")
def tokenizer():
    return build_tokenizer(4096)


def gateway_runner(tokenizer, turns: list[str], command=tuple(AGENT), **settings) -> tuple[AgentRunner,
                                                                                           ScriptedEngine]:
    cfg = GatewayConfig(command=list(command), **settings)
    engine = ScriptedEngine(tokenizer, turns)
    return AgentRunner(engine, TurnTemplate(tokenizer, [EOS]), 256, lambda name: GatewayLoop(cfg, Registry()),
                       "gateway", cfg), engine


def run_rows(runner: AgentRunner, rows: list[dict], max_new_tokens: int = 32):
    records = [PromptRecord([QUESTION], "4", "arithmetic", extra) for extra in rows]
    return runner(prompt_batch(records), SamplingParams(max_new_tokens=max_new_tokens, seed=0))


def rendered(tokenizer, messages: list[dict]) -> list[int]:
    text = tokenizer.apply_chat_template(messages, add_generation_prompt=True, tokenize=False)
    return tokenizer(text, add_special_tokens=False)["input_ids"]


def trajectory(out, row: int) -> tuple[list[int], list[int], list[int]]:
    """Row ``row``'s prompt ids, response ids and response mask, unpadded."""
    length = int(out["response_attention_mask"][row].sum())
    prompt = out["prompts"][row][out["prompt_mask"][row].bool()].tolist()
    return prompt, out["responses"][row, :length].tolist(), out["response_mask"][row, :length].tolist()


def test_an_exact_extension_appends_and_an_edited_history_forks(tokenizer, tmp_path):
    calls = [{"messages": [QUESTION], "via": "path"},
             {"messages": [QUESTION, {"role": "assistant", "content": "{0}"}, FOLLOW_UP], "via": "header",
              "stream": True},
             {"messages": [{"role": "user", "content": "What is 2+3?"}, {"role": "assistant", "content": "{0}"},
                           FOLLOW_UP], "via": "path"}]
    runner, engine = gateway_runner(tokenizer, ["4", "Yes, 4.", "4", "Yes, 4.", "5"])
    try:  # two episodes, one after the other (the scripted engine answers in call order)
        extended = run_rows(runner, [{"script": "calls", "calls": calls[:2], "out": str(tmp_path / "a.json")}])
        forked = run_rows(runner, [{"script": "calls", "calls": calls, "out": str(tmp_path / "b.json"),
                                    "reward": 0.5}])
    finally:
        runner.close()
    four, yes, five = (tokenizer(text)["input_ids"] + [EOS] for text in ("4", "Yes, 4.", "5"))
    # the extension: the second call's prompt is the first's, the sampled ids, then the template's ids
    prompt, response, mask = trajectory(extended, 0)
    assert prompt == rendered(tokenizer, [QUESTION]) == engine.prompts[0]
    second = rendered(tokenizer, calls[1]["messages"][:1] + [{"role": "assistant", "content": "4"}, FOLLOW_UP])
    assert engine.prompts[1] == second == prompt + response[: len(response) - len(yes)]
    assert response[: len(four)] == four and response[-len(yes):] == yes
    assert mask == [1] * len(four) + [0] * (len(response) - len(four) - len(yes)) + [1] * len(yes)
    assert extended.meta["metrics"]["agent/forks"] == 0
    answers = json.loads((tmp_path / "a.json").read_text())
    assert [a["content"] for a in answers] == ["4", "Yes, 4."] and answers[1]["prompt_token_ids"] == second
    # the fork: an edited first message does not extend; the trajectory is the new sample alone
    prompt, response, mask = trajectory(forked, 0)
    edited = rendered(tokenizer, [calls[2]["messages"][0], {"role": "assistant", "content": "4"}, FOLLOW_UP])
    assert engine.prompts[4] == prompt == edited and response == five and mask == [1] * len(five)
    assert forked.meta["metrics"]["agent/forks"] == 1
    assert forked["agent_finish_reason"].tolist() == ["answer"] and forked["agent_turns"].tolist() == [3]
    assert forked["agent_reward"].tolist() == [0.5] and forked.meta["metrics"]["agent/reward/posted/mean"] == 0.5
    log_probs = forked["rollout_log_probs"][0, : len(five)].tolist()
    assert log_probs == pytest.approx([-(5 + k / 1000) for k in range(len(five))])


def test_at_most_max_concurrent_agents_run_at_once(tokenizer, tmp_path):
    runner, _ = gateway_runner(tokenizer, [], max_concurrent_agents=1)
    (tmp_path / "running").mkdir()
    rows = [{"script": "count", "folder": str(tmp_path / "running"), "out": str(tmp_path / f"{k}.txt")}
            for k in range(3)]
    try:
        out = run_rows(runner, rows)
    finally:
        runner.close()
    assert out["agent_finish_reason"].tolist() == ["answer"] * 3
    assert [(tmp_path / f"{k}.txt").read_text() for k in range(3)] == ["1"] * 3  # each ran alone


def test_the_example_agent_runs_the_calculator_the_model_calls_and_posts_its_reward(tokenizer):
    call = '<tool_call>{"name": "calculator", "arguments": {"expression": "2*2"}}</tool_call>'
    runner, engine = gateway_runner(tokenizer, [call, "It is 4."], command=EXAMPLE)
    try:
        out = run_rows(runner, [{}], max_new_tokens=128)
    finally:
        runner.close()
    prompt, response, mask = trajectory(out, 0)
    assert tokenizer.decode(prompt).startswith("system: You may call tools.")  # its tool, as Hermes instructions
    # the model's call came back parsed (tool_calls), the agent ran it and sent the result as a tool message;
    # the answer sent back as received re-rendered to an exact extension
    inserted = tokenizer.decode([t for t, m in zip(response, mask) if m == 0])
    assert inserted == "\ntool: 4\nassistant: " and out.meta["metrics"]["agent/forks"] == 0
    assert engine.prompts[1] == prompt + response[: len(response) - len(tokenizer("It is 4.")["input_ids"]) - 1]
    assert out["agent_reward"].tolist() == [1.0] and out.meta["metrics"]["agent/reward/correct/mean"] == 1.0


def post(url: str, body, headers=None) -> tuple[int, str]:
    request = urllib.request.Request(url, data=json.dumps(body).encode(), headers=headers or {})
    try:
        with urllib.request.urlopen(request, timeout=30) as answer:
            return answer.status, answer.read().decode()
    except urllib.error.HTTPError as error:
        return error.code, error.read().decode()


def test_requests_that_name_no_running_episode_get_400_naming_what_is_wrong(tokenizer, tmp_path):
    runner, _ = gateway_runner(tokenizer, [])
    go = tmp_path / "go"
    result = {}
    worker = threading.Thread(target=lambda: result.update(out=run_rows(runner, [{"script": "wait", "go": str(go)}])))
    worker.start()
    try:
        while not ("gateway" in runner.loops and runner.loops["gateway"].gateway and
                   runner.loops["gateway"].gateway.sessions):
            time.sleep(0.05)
        gateway = runner.loops["gateway"].gateway
        (episode,) = gateway.sessions
        chat = {"model": "policy", "messages": [QUESTION]}
        with pytest.raises(openai.BadRequestError, match="no episode id: send it in the URL"):
            openai.OpenAI(base_url=gateway.url + "/v1", api_key="k", max_retries=0).chat.completions.create(**chat)
        for url, headers, named in [
                (gateway.url + "/v1/chat/completions", {"X-Rlloom-Episode": "x1"}, "malformed episode id 'x1'"),
                (f"{gateway.url}/episodes/{'0' * 32}/v1/chat/completions", {}, f"no running episode {'0' * 32}"),
                (f"{gateway.url}/episodes/{episode}/reward", {}, "must be a finite number")]:
            status, text = post(url, chat if "chat" in url else {"reward": "high"}, headers)
            assert status == 400 and named in json.loads(text)["error"]["message"]
        status, text = post(f"{gateway.url}/episodes/{episode}/v1/chat/completions", {**chat, "n": 2})
        assert status == 400 and "n must be 1" in text
        assert post(f"{gateway.url}/episodes/{episode}/reward", {"reward": 2})[0] == 200
    finally:
        go.write_text("")
        worker.join()
        runner.close()
    assert result["out"]["agent_reward"].tolist() == [2.0]
    assert result["out"]["agent_finish_reason"].tolist() == ["answer"]


def running(pid: int) -> bool:
    """Whether process ``pid`` exists and is not a zombie."""
    try:
        return pathlib.Path(f"/proc/{pid}/stat").read_text().split(")")[-1].split()[0] != "Z"
    except FileNotFoundError:
        return False


def test_agents_that_fail_or_hang_are_counted_and_the_batch_goes_on(tokenizer, tmp_path, caplog):
    # The hanging agent holds the batch for the whole timeout; the answering one must end within it, and under
    # load (a busy core beside the two test workers) starting it took over 5 s.
    runner, _ = gateway_runner(tokenizer, ["4"], episode_timeout_s=20)
    hang = tmp_path / "hang.json"
    rows = [{"script": "fail"}, {"script": "fail"}, {"script": "hang", "out": str(hang)},
            {"script": "calls", "calls": [{"messages": [QUESTION], "via": "path"}], "out": str(tmp_path / "a.json")}]
    try:
        with caplog.at_level(logging.WARNING, logger="rlloom_server.gateway"):
            out = run_rows(runner, rows)
    finally:
        runner.close()
    assert out["agent_finish_reason"].tolist() == ["agent_error", "agent_error", "agent_timeout", "answer"]
    assert out.meta["metrics"]["agent/finish_reason/agent_error"] == 0.5
    (warning,) = [record.getMessage() for record in caplog.records]  # logged once, however many fail
    assert warning.endswith("exited with status 3 (the run's first failure; every one counts in "
                            "agent/finish_reason/agent_error): agent broke: no luck")
    assert trajectory(out, 3)[1] == tokenizer("4")["input_ids"] + [EOS]
    assert trajectory(out, 0)[1] == []  # an agent that never called leaves an empty response, masked out
    assert not any(running(pid) for pid in json.loads(hang.read_text()))  # its whole process group is killed


def test_a_call_past_max_turns_gets_409_and_the_episode_ends_with_max_turns(tokenizer, tmp_path):
    runner, engine = gateway_runner(tokenizer, ["4"], max_turns=1)
    calls = [{"messages": [QUESTION], "via": "path"},
             {"messages": [QUESTION, {"role": "assistant", "content": "{0}"}, FOLLOW_UP], "via": "path"}]
    try:
        out = run_rows(runner, [{"script": "calls", "calls": calls, "out": str(tmp_path / "a.json")}])
    finally:
        runner.close()
    # the agent's client raised on the 409 and it exited 1; the episode had already ended with max_turns
    assert out["agent_finish_reason"].tolist() == ["max_turns"] and len(engine.prompts) == 1
    assert trajectory(out, 0)[1] == tokenizer("4")["input_ids"] + [EOS]


def test_a_command_that_names_no_program_is_refused_when_the_loop_is_built():
    with pytest.raises(ValueError, match="agent.command: no program 'no-such-agent-program'"):
        GatewayLoop(GatewayConfig(command=["no-such-agent-program", "x.py"]), Registry())


@pytest.mark.parametrize("overrides, message", [
    ([], "agent.command=[]: agent=gateway needs the agent program and its arguments"),
    (["agent.command=[x]", "agent.episode_timeout_s=0"], "agent.episode_timeout_s=0.0: must be in (0, inf)"),
])
def test_bad_gateway_settings_exit_2_naming_the_key(overrides, message):
    result = subprocess.run([sys.executable, "-m", "rlloom.cli", "train", "preset=tiny", "agent=gateway", *overrides],
                            capture_output=True, text=True, timeout=120)
    assert result.returncode == 2 and message in result.stderr and "Traceback" not in result.stderr


# ---------------------------------------------------------------------------------------- real runs
@pytest.mark.slow
def test_the_example_black_box_agent_trains_on_exactly_the_ids_the_engine_generated(tokenizer, tmp_path,
                                                                                     monkeypatch):
    generated, trained = [], []
    generate_one, call = HFRolloutEngine.generate_one, AgentRunner.__call__

    async def recorded_generate_one(self, prompt_ids, sampling):
        answer = await generate_one(self, prompt_ids, sampling)
        generated.append((list(prompt_ids), answer.token_ids[0], answer.log_probs[0]))
        return answer

    def recorded_call(self, prompts, sampling):
        trained.append(call(self, prompts, sampling))
        return trained[-1]

    monkeypatch.setattr(HFRolloutEngine, "generate_one", recorded_generate_one)
    monkeypatch.setattr(AgentRunner, "__call__", recorded_call)
    rlloom_trainer.train([
        "preset=tiny", "data=arithmetic", "reward=agent", "agent=gateway",
        f"agent.command=[{','.join(EXAMPLE)}]",
        "sampling.max_new_tokens=12", "agent.max_response_tokens=128", "algorithm.n=2", "trainer.train_batch_size=2",
        "trainer.total_steps=2", "trainer.test_freq=0", "trainer.val_before_train=false", "data.num_val=1",
        f"trainer.run_dir={tmp_path}"])
    rows = training_rows(metric_rows(str(tmp_path)))
    assert len(rows) == 2 and all(row["agent/finish_reason/answer"] == 1 for row in rows)
    assert all(row["agent/turns/mean"] == 2 and "agent/forks" in row and "agent/reward/correct/mean" in row
               for row in rows)
    assert all(row["training/rollout_probs_diff_mean"] < 1e-4 for row in rows)
    assert len(trained) >= 2 and generated  # two training steps (and the final validation) went through the spies
    calls = {}  # prompt -> the engine's answers to it (a row's samples share their first prompt)
    for prompt, ids, log_probs in generated:
        calls.setdefault(tuple(prompt), []).append((ids, log_probs))
    for out in trained:  # every sampled stretch of every trajectory is an engine answer to the ids before it
        for row in range(len(out)):
            prompt, response, mask = trajectory(out, row)
            # the agent's calculator tool came through the gateway (the tiny template: Hermes instructions)
            assert tokenizer.decode(prompt).startswith("system: You may call tools.")
            starts = [k for k in range(len(mask)) if mask[k] and (k == 0 or not mask[k - 1])]
            assert starts and sum(mask) > 0
            for start in starts:
                end = next((k for k in range(start, len(mask)) if not mask[k]), len(mask))
                sampled = (response[start:end], out["rollout_log_probs"][row, start:end].tolist())
                assert any(sampled[0] == ids[: end - start] and sampled[1] == pytest.approx(log_probs[: end - start])
                           for ids, log_probs in calls[tuple(prompt + response[:start])])
