"""The tools ``python`` (programs in the code reward's sandbox) and ``retrieval`` (BM25 over a local
collection), and tool settings (``agent.tool_settings``) checked at compose time and given to the tools
the loop builds."""

from __future__ import annotations

import asyncio
import json
import math
import os
import pathlib
import subprocess
import sys

import pytest
from agent_helpers import run_tool_loop
from rlloom.plugins.registry import Registry
from rlloom_agents import passages as collection
from rlloom_agents.config import RetrievalToolConfig, ToolLoopConfig
from rlloom_agents.loops import ToolLoop
from rlloom_agents.retrieval import Retrieval
from rlloom_models.tiny import build_tokenizer
from rlloom_rewards.code.python_tool import PythonTool, PythonToolConfig

ROOT = pathlib.Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def tokenizer():
    return build_tokenizer(4096)


@pytest.fixture(scope="module")
def registry():
    return Registry()


def call(tool: str, **arguments) -> str:
    return f"<tool_call>{json.dumps({'name': tool, 'arguments': arguments})}</tool_call>"


# ---------------------------------------------------------------------------------------- python
ESCAPE = "/tmp/rlloom-python-tool-escaped"
HOSTILE = {
    "loop": "while True:\n    pass\n",
    "fork bomb": "import os\nwhile True:\n    os.fork()\n",
    "allocation": "block = bytearray(8 * 2**30)\n",
    "write outside": f"open({ESCAPE!r}, 'w').write('out')\n",
    "read the host": f"print(open({str(ROOT / 'README.md')!r}).read())\n",
}
TIMED_OUT = "error: the program ran past its limit of 2 s and was stopped"
SEEN = {"loop": (TIMED_OUT,), "allocation": ("MemoryError",), "write outside": ("PermissionError",),
        "read the host": ("FileNotFoundError",),
        # a fork that fails ends its process (BlockingIOError); the first process may also outlive the clock
        "fork bomb": ("error: the program exited with status 1\n", TIMED_OUT)}


@pytest.mark.skipif(os.geteuid() != 0, reason="the kernel containment runs as root only")
def test_hostile_programs_are_error_observations_and_the_run_goes_on(tokenizer, registry):
    programs = [*HOSTILE.values(), "print(sum(range(10**6)))\n"]
    out, engine = run_tool_loop(
        tokenizer, registry, ["".join(call("python", code=code) for code in programs), "Done."],
        max_new_tokens=4000, tools=["python"], max_parallel_calls=len(programs), max_tool_response_tokens=400,
        max_response_tokens=16000, tool_timeout_s=60,
        tool_settings={"python": {"timeout_s": 2, "memory_mb": 256, "max_processes": 8, "max_concurrent": 6}})
    assert out["agent_finish_reason"].tolist() == ["answer"] and out["agent_turns"].tolist() == [2]
    metrics = out.meta["metrics"]
    assert metrics["agent/tool_calls"] == len(programs) and metrics["agent/tool_errors"] == len(HOSTILE)
    # the second turn's prompt holds every observation, in the calls' order
    seen = tokenizer.decode(engine.prompts[1]).split("\ntool: ")[1:]
    assert len(seen) == len(programs)
    for name, observation in zip(HOSTILE, seen):
        assert observation.startswith("error: ") and any(s in observation for s in SEEN[name]), (name, observation)
    assert seen[-1].startswith("499999500000\n")
    assert not os.path.exists(ESCAPE)
    readme = (ROOT / "README.md").read_text().splitlines()[0]
    assert readme not in tokenizer.decode(engine.prompts[1])


def test_without_root_the_python_tool_refuses_unless_allowed(monkeypatch):
    monkeypatch.setattr("rlloom_rewards.code.sandbox.os.geteuid", lambda: 1000)
    with pytest.raises(RuntimeError, match=r"set agent\.tool_settings\.python\.allow_unsandboxed=true"):
        PythonTool(PythonToolConfig())
    with pytest.warns(RuntimeWarning, match="the tool python runs untrusted code WITHOUT kernel containment"):
        PythonTool(PythonToolConfig(allow_unsandboxed=True))


# ---------------------------------------------------------------------------------------- retrieval
def test_the_shipped_collection_is_the_generators_output_and_small():
    shipped = collection.SHIPPED.read_text(encoding="utf-8")
    assert shipped == collection.jsonl(collection.passages())
    assert len(shipped.encode()) < 2**20 and len(shipped.splitlines()) == sum(collection.COUNTS.values())


def test_bm25_scores_are_okapi_bm25_by_hand():
    """Three passages, the query "red fox": score = Σ idf · tf · (k1 + 1) / (tf + k1 · (1 − b + b · |d| / avgdl))
    with idf = ln(1 + (N − df + 0.5) / (df + 0.5)), k1 = 1.5, b = 0.75 (stop words "the" dropped)."""
    from rlloom_agents.retrieval import BM25

    texts = ["the red fox red", "a blue fox", "green grass grows tall here"]
    lengths, avgdl = [3, 2, 5], 10 / 3  # "the" and "a" are stop words
    idf = {"red": math.log(1 + (3 - 1 + 0.5) / 1.5), "fox": math.log(1 + (3 - 2 + 0.5) / 2.5)}

    def term(word, tf, length):
        return idf[word] * tf * 2.5 / (tf + 1.5 * (0.25 + 0.75 * length / avgdl))

    expected = [term("red", 2, lengths[0]) + term("fox", 1, lengths[0]), term("fox", 1, lengths[1]), 0.0]
    assert BM25(texts).scores("Red fox?").tolist() == pytest.approx(expected, rel=1e-12)


def test_a_question_about_a_passages_facts_finds_it_first():
    tool = Retrieval(RetrievalToolConfig(top_k=3))
    found = {(passage.id, question): [i for i, _ in tool.search(question)] for passage in collection.passages()
             for question in passage.questions}
    assert len(found) == 8000
    assert [(key, ids) for key, ids in found.items() if ids[:1] != [key[0]]] == []
    answer = asyncio.run(tool({"query": "How many inhabitants does Kavor have?"}, None))
    assert answer.splitlines()[0].startswith("[city-0001] Kavor is a city") and len(answer.splitlines()) == 3
    assert asyncio.run(tool({"query": "the of zzzq"}, None)) == "no passage matches the query"


def test_a_collection_of_ones_own_and_the_settings_reach_the_tool(tmp_path, registry):
    folder = tmp_path / "notes"
    folder.mkdir()
    (folder / "kettle.txt").write_text("The kettle boils at noon.")
    (folder / "lamp.txt").write_text("The lamp is lit at dusk.")
    loop = ToolLoop(ToolLoopConfig(tools=["retrieval"], tool_settings={"retrieval": {"corpus": str(folder),
                                                                                     "top_k": 1}}), registry)
    (tool,) = loop.tools
    assert asyncio.run(tool({"query": "when is the lamp lit"}, None)) == "[lamp] The lamp is lit at dusk."
    lines = tmp_path / "notes.jsonl"
    lines.write_text('{"id": "a", "text": "alpha beta"}\n\n{"id": "b", "text": "gamma"}\n')
    assert Retrieval(RetrievalToolConfig(corpus=str(lines), top_k=5)).search("gamma") == [("b", "gamma")]


def test_a_missing_or_malformed_collection_is_an_error_naming_it(tmp_path):
    gone = tmp_path / "gone.jsonl"
    gone.write_text('{"id": "a", "text": "alpha"}\n')
    cfg = RetrievalToolConfig(corpus=str(gone))
    gone.unlink()  # gone between the config check and the start
    with pytest.raises(FileNotFoundError, match=f"retrieval corpus {gone}: no such file or folder"):
        Retrieval(cfg)
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"id": "a", "text": "alpha"}\n{"id": 2, "text": "beta"}\n')
    with pytest.raises(ValueError, match=f'{bad}:2: a passage must be a JSON object with string "id" and "text"'):
        Retrieval(RetrievalToolConfig(corpus=str(bad)))
    empty = tmp_path / "empty"
    empty.mkdir()
    with pytest.raises(FileNotFoundError, match=f"retrieval corpus {empty}: holds no passage"):
        Retrieval(RetrievalToolConfig(corpus=str(empty)))


# ---------------------------------------------------------------------------------------- settings
@pytest.mark.parametrize("overrides, message", [
    (["agent.tools=[python]", "+agent.tool_settings.python.timeout_s=soon"],
     "agent.tool_settings.python.timeout_s=soon: invalid value (expected float)"),
    (["agent.tools=[python]", "+agent.tool_settings.python.timeot_s=3"],
     "agent.tool_settings.python.timeot_s: no such key of tool python. Valid keys: timeout_s, "),
    (["agent.tools=[python]", "+agent.tool_settings.python.max_concurrent=0"],
     "agent.tool_settings.python.max_concurrent=0: must be >= 1"),
    (["agent.tools=[retrieval]", "+agent.tool_settings.retrieval.corpus=/no/such/passages.jsonl"],
     "agent.tool_settings.retrieval.corpus=/no/such/passages.jsonl: no such file or folder"),
    (["+agent.tool_settings.retrieval.top_k=2"],
     "agent.tool_settings.retrieval: retrieval is not in agent.tools (calculator)"),
    (["+agent.tool_settings.calculator.digits=3"], "agent.tool_settings.calculator: tool calculator takes no settings"),
])
def test_bad_tool_settings_exit_2_naming_the_key(overrides, message):
    result = subprocess.run([sys.executable, "-m", "rlloom.cli", "train", "preset=tiny", "agent=tools", *overrides],
                            capture_output=True, text=True, timeout=120)
    assert result.returncode == 2, result.stderr
    assert message in result.stderr and "Traceback" not in result.stderr
