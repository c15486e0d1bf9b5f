"""``rlloom chat MODEL [overrides]``: talk to a checkpoint or model, one line of stdin per user turn.

The conversation so far is rendered with the chat template each turn and answered by the rollout engine
(:class:`~rlloom_trainer.commands.generate.RolloutSession`); turn ``k`` samples with ``derive_seed(trainer.seed, 0,
"chat", k)``. A line ``/reset`` starts a new conversation; end of input ends the chat.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable

from rlloom_trainer.commands.generate import rollout_session
from rlloom_trainer.commands.targets import add_model_arguments


def cmd_chat(args: argparse.Namespace) -> int:
    from rlloom.controller.step import derive_seed

    interactive = sys.stdin.isatty()
    with rollout_session(args.model, args.overrides) as session:
        messages: list[dict[str, str]] = []
        turn = 0
        while True:
            if interactive:
                print("> ", end="", file=sys.stderr, flush=True)
            line = sys.stdin.readline()
            if not line:
                return 0
            line = line.strip()
            if line == "/reset":
                messages = []
                continue
            if not line:
                continue
            messages.append({"role": "user", "content": line})
            (reply,) = session.generate([list(messages)], 1, derive_seed(session.seed, 0, "chat", turn))
            messages.append({"role": "assistant", "content": reply["response"]})
            print(reply["response"], flush=True)
            turn += 1


def command(parser: argparse.ArgumentParser) -> Callable[[argparse.Namespace], int]:
    """chat with a checkpoint or model (one stdin line per turn)

    Adds ``rlloom chat``'s arguments to ``parser``; returns :func:`cmd_chat`."""
    add_model_arguments(parser, (
        "Each line of stdin is a user message; the answer is printed on stdout. /reset forgets the "
        "conversation. MODEL: a run folder, a checkpoint or a Hugging Face folder; overrides: "
        "sampling.temperature=0.7, sampling.max_new_tokens=256, rollout=vllm, ..."))
    return cmd_chat
