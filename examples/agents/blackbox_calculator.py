"""A black-box agent for ``agent=gateway``: it knows nothing of rlloom, only OpenAI's API.

It reads its task from ``RLLOOM_EPISODE`` (JSON: ``prompt``, ``ground_truth``, ...), asks the model
with a ``calculator`` tool offered, runs the calculator itself when the model calls it (and says
so in a ``tool`` message), else asks the model once to check its answer (a ``user`` message), then
posts a reward to the gateway: 1 when the last integer of the model's final answer is the ground
truth, else 0. The ``openai`` client finds the gateway in ``OPENAI_BASE_URL`` and ``OPENAI_API_KEY``;
the reward goes to the URL beside it, ``<base without /v1>/reward``, with plain HTTP. The command
that trains it: README.md beside this file.
"""

from __future__ import annotations

import ast
import json
import operator
import os
import re
import urllib.request

import openai

CALCULATOR = {"type": "function", "function": {
    "name": "calculator", "description": "Evaluate an arithmetic expression, e.g. 1234*5678.",
    "parameters": {"type": "object", "properties": {"expression": {"type": "string"}}, "required": ["expression"]}}}
OPERATORS = {ast.Add: operator.add, ast.Sub: operator.sub, ast.Mult: operator.mul, ast.FloorDiv: operator.floordiv}


def calculate(expression: str) -> str:
    """Integers and ``+ - * //`` only; anything else is an error message for the model."""
    def value(node: ast.AST) -> int:
        if isinstance(node, ast.Constant) and type(node.value) is int:
            return node.value
        if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.USub):
            return -value(node.operand)
        if isinstance(node, ast.BinOp) and type(node.op) in OPERATORS:
            return OPERATORS[type(node.op)](value(node.left), value(node.right))
        raise ValueError("only integers and + - * // are allowed")
    try:
        return str(value(ast.parse(expression, mode="eval").body))
    except (SyntaxError, ValueError, ZeroDivisionError) as error:
        return f"error: {error}"


def follow_up(message) -> list[dict]:
    """The messages after the model's first answer: the answer as it came back, then the calculator's
    results (one tool message per call) or a request to check the answer."""
    sent = [{"role": "assistant", "content": message.content or ""}]
    if not message.tool_calls:
        return sent + [{"role": "user", "content": "Check your answer and give the final number."}]
    sent[0]["tool_calls"] = [call.model_dump() for call in message.tool_calls]
    for call in message.tool_calls:
        try:
            result = calculate(json.loads(call.function.arguments).get("expression", ""))
        except (json.JSONDecodeError, AttributeError):
            result = "error: the arguments are not a JSON object"
        sent.append({"role": "tool", "tool_call_id": call.id, "content": result})
    return sent


def main() -> None:
    episode = json.loads(os.environ["RLLOOM_EPISODE"])
    prompt = episode["prompt"]
    messages = [{"role": "user", "content": prompt}] if isinstance(prompt, str) else prompt
    client = openai.OpenAI(max_retries=0)
    first = client.chat.completions.create(model="policy", messages=messages, tools=[CALCULATOR]).choices[0].message
    messages += follow_up(first)
    try:
        final = client.chat.completions.create(model="policy", messages=messages, tools=[CALCULATOR]).choices[0].message
    except openai.ConflictError:  # 409: the episode's response budget is spent; the first answer is final
        final = first
    numbers = re.findall(r"-?\d+", final.content or "")
    correct = float(bool(numbers) and numbers[-1] == str(episode["ground_truth"]).strip())
    reward_url = os.environ["OPENAI_BASE_URL"].rstrip("/").removesuffix("/v1") + "/reward"
    body = json.dumps({"reward": correct, "parts": {"correct": correct}}).encode()
    request = urllib.request.Request(reward_url, data=body, headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(request, timeout=60):
        pass


if __name__ == "__main__":
    main()
