"""The trusted side of ``reward=code``'s verdict: ``python -I tester.py``, a job on stdin, a report on stdout.

Started by :func:`rlloom_rewards.code.harness.run_tests` next to the sandboxed candidate, outside the
sandbox, so nothing the candidate does can reach this process or its report. The job is a JSON object:
``prefix`` (the task's own code, e.g. a HumanEval prompt's imports and helpers: trusted), ``tests`` and
``suffix`` (the test code, e.g. ``def check(candidate): ...`` and ``check(f)``), ``entry_point`` (the
function the task asks for, or ``null``), ``nonce`` (echoed in the report), and the two pipe descriptors
to the candidate, ``requests_fd`` and ``replies_fd`` (protocol: :mod:`rlloom_rewards.code.wire`).

The tester runs ``prefix`` in a fresh namespace whose builtins are the real ones, then binds to a
:class:`CandidateCall` each function or class the candidate announced that is either the
``entry_point`` or a name :func:`left_for_candidate` (read by the prefix or the tests, bound by neither,
not defined by the prefix, not a builtin), so that a response can replace neither a trusted helper the
tests rely on (HumanEval's ``poly``) nor a builtin they call (``abs``, ``len``, ``range``, ``sorted``…).
Then it runs the top-level statements of ``tests + suffix`` one by one, stopping at the first that raises.
Values come back from the candidate as plain data only, so every comparison a test makes happens here,
on objects the candidate did not build.

Report (one JSON line on stdout; what the tests print goes to stderr): ``{"nonce", "statements",
"completed", "failure"}``, where ``failure`` is ``null`` or the first failure's last line; or
``{"nonce", "error"}`` when the task's own code (``prefix``, or ``tests`` that do not parse) is broken.
"""

from __future__ import annotations

import ast
import builtins
import importlib.util
import json
import os
import sys
import traceback


def _load_wire():
    path = os.path.join(os.path.dirname(os.path.abspath(__file__)), "wire.py")
    spec = importlib.util.spec_from_file_location("rlloom_sandbox_wire", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


wire = _load_wire()


class CandidateGone(RuntimeError):
    """The candidate's process ended (or closed its pipe) before answering."""


class CandidateError(Exception):
    """An exception the candidate raised whose type is not a built-in exception."""


def _exception(type_name: object, message: object) -> Exception:
    """The exception to raise here for one the candidate raised (built-in types keep their type)."""
    kind = getattr(builtins, str(type_name), None)
    if isinstance(kind, type) and issubclass(kind, Exception):
        return kind(str(message))
    return CandidateError(f"{type_name}: {message}")


class Channel:
    """The two pipes to the sandboxed candidate."""

    def __init__(self, requests_fd: int, replies_fd: int) -> None:
        self.requests_fd, self.replies_fd = requests_fd, replies_fd

    def receive(self) -> dict:
        message = wire.receive(self.replies_fd)
        if message is None:
            raise CandidateGone("the candidate's program ended before answering")
        return message

    def call(self, name: str, args: tuple, kwargs: dict) -> dict:
        request = {"call": name, "args": [wire.encode(arg) for arg in args],
                   "kwargs": {key: wire.encode(value) for key, value in kwargs.items()}}
        try:
            wire.send(self.requests_fd, request)
        except BrokenPipeError:
            raise CandidateGone("the candidate's program ended before answering") from None
        return self.receive()


class CandidateCall:
    """Stands for the candidate's function (or class) ``name``: calling it asks the candidate's process."""

    def __init__(self, name: str, channel: Channel) -> None:
        self.name, self.channel = name, channel

    def __call__(self, *args, **kwargs):
        reply = self.channel.call(self.name, args, kwargs)
        if "return" in reply:
            return wire.decode(reply["return"])
        raise _exception(reply.get("raise"), reply.get("message"))

    def __repr__(self) -> str:
        return f"<candidate's {self.name}>"


def _last_line(error: BaseException) -> str:
    return "".join(traceback.format_exception_only(type(error), error)).strip().splitlines()[-1][:500]


def _read_and_bound(tree: ast.AST) -> tuple[set[str], set[str]]:
    """(the names ``tree`` reads, the names it binds in any scope: assignment targets, ``def``/``class``
    names, parameters, imports, ``except ... as``, ``match`` captures)."""
    read, bound = set(), set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Name):
            (read if isinstance(node.ctx, ast.Load) else bound).add(node.id)
        elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            bound.add(node.name)
        elif isinstance(node, ast.arg):
            bound.add(node.arg)
        elif isinstance(node, ast.alias):
            bound.add(node.asname or node.name.split(".")[0])
        elif isinstance(node, (ast.ExceptHandler, ast.MatchAs, ast.MatchStar)) and node.name:
            bound.add(node.name)
        elif isinstance(node, ast.MatchMapping) and node.rest:
            bound.add(node.rest)
    return read, bound


def left_for_candidate(prefix: ast.Module, tests: ast.Module, trusted: set[str]) -> set[str]:
    """The names besides the entry point that the candidate may supply: read by ``prefix`` or ``tests``,
    bound by neither anywhere, not in ``trusted`` (the prefix's namespace), not a builtin."""
    prefix_read, prefix_bound = _read_and_bound(prefix)
    tests_read, tests_bound = _read_and_bound(tests)
    return (prefix_read | tests_read) - prefix_bound - tests_bound - trusted - set(dir(builtins))


def run(job: dict) -> dict:
    """The report of the module doc for ``job``."""
    channel = Channel(job["requests_fd"], job["replies_fd"])
    namespace = {"__name__": "__main__", "__builtins__": builtins}
    try:
        prefix = ast.parse(job["prefix"], "<task prefix>")
        exec(compile(prefix, "<task prefix>", "exec"), namespace)  # noqa: S102 - the task's trusted code
        tests = ast.parse(job["tests"] + "\n" + job["suffix"], "<tests>")
    except Exception as error:  # noqa: BLE001 - a broken task is reported as such
        return {"error": f"the task's own code fails: {_last_line(error)}"}
    report = {"statements": len(tests.body), "completed": 0, "failure": None}
    try:
        announced = {name for name in channel.receive()["callables"] if isinstance(name, str)}
    except Exception as error:  # noqa: BLE001 - no usable announcement: the candidate failed
        return {**report, "failure": _last_line(error)}
    allowed = left_for_candidate(prefix, tests, set(namespace)) | {job["entry_point"]}
    for name in announced & allowed:
        namespace[name] = CandidateCall(name, channel)
    for statement in tests.body:
        try:
            exec(compile(ast.Module([statement], []), "<tests>", "exec"), namespace)  # noqa: S102
        except BaseException as error:  # noqa: BLE001 - a test's failure, whatever it raised
            return {**report, "failure": _last_line(error)}
        report["completed"] += 1
    return report


def main() -> None:
    job = json.load(sys.stdin)
    report_fd = os.dup(1)
    os.dup2(2, 1)  # what the tests print must not mix with the report
    report = {"nonce": job["nonce"], **run(job)}
    os.write(report_fd, (json.dumps(report) + "\n").encode("utf-8"))


if __name__ == "__main__":
    main()
