"""``rlloom generate MODEL [overrides]``: responses to prompts (one per line of a file or stdin) as JSONL.

The model is served by the run's rollout engine (``rollout=hf`` unless overridden, built from the registry as a
run builds it), with the ``sampling`` settings and ``trainer.seed``; a checkpoint's own config is the default.
Each line of input is one user message, rendered with the tokenizer's chat template (``--raw``: tokenized as is).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import sys
from collections.abc import Callable, Iterator
from typing import Any

from rlloom_trainer.commands.targets import add_model_arguments, model_folder, resolve_target, saved_overrides


class RolloutSession:
    """A rollout engine on one model, its tokenizer and the run's sampling settings."""

    def __init__(self, resolved: Any) -> None:
        from rlloom.controller.roles import build_role
        from rlloom_trainer.prompts import PromptEncoder
        from rlloom.plugins.registry import get_registry
        from rlloom.types import EngineSpec, RoleSpec
        from rlloom_trainer.trainer import sampling_params
        from transformers import AutoTokenizer

        registry, sections, trainer = get_registry(), resolved.sections, resolved.sections["trainer"]
        model_path = registry.build("model", resolved.choices["model"], sections["model"])
        self.seed = trainer.seed
        self.sampling = sampling_params(sections["sampling"])
        self.tokenizer = AutoTokenizer.from_pretrained(model_path)
        self.encoder = PromptEncoder(self.tokenizer, trainer.max_prompt_length)
        spec = EngineSpec(model_path, "rollout", trainer.seed, 0, trainer.device)
        self.engine = build_role(RoleSpec("rollout", "rollout", resolved.choices["rollout"], sections["rollout"],
                                          spec), registry)

    def generate(self, prompts: list[Any], n: int, seed: int) -> list[dict]:
        """``n`` responses to each prompt (a list of chat messages, or a string tokenized as is), sampled with
        ``seed``: one dict per response, prompts in order."""
        import dataclasses

        from rlloom.data import PromptRecord

        batch = self.encoder.encode([PromptRecord(prompt, None, "generate") for prompt in prompts])
        out = self.engine.generate(batch, dataclasses.replace(self.sampling, n=n, seed=seed))
        has_log_probs = "rollout_log_probs" in out.keys()
        rows = []
        for row in range(len(out)):
            mask = out["response_mask"][row].bool()
            ids = out["responses"][row][mask].tolist()
            rows.append({
                "prompt": out["prompt_text"][row], "index": row // n, "sample": row % n,
                "response": self.tokenizer.decode(ids, skip_special_tokens=True), "token_ids": ids,
                "log_probs": out["rollout_log_probs"][row][mask].tolist() if has_log_probs else None,
            })
        return rows

    def close(self) -> None:
        self.engine.close()  # every RolloutEngine has close()


@contextlib.contextmanager
def rollout_session(path: str, overrides: list[str]) -> Iterator[RolloutSession]:
    """A :class:`RolloutSession` on the model ``path`` names, configured by its checkpoint's config (if any) and
    ``overrides``."""
    from rlloom.config import compose_config

    target = resolve_target(path)
    base = saved_overrides(target, overrides)
    compose_config(base + list(overrides))  # a bad override is reported before any model is exported
    with model_folder(target) as folder:
        session = RolloutSession(compose_config([*base, "model=hf", f"model.path={folder}", *overrides]))
        try:
            yield session
        finally:
            session.close()


def cmd_generate(args: argparse.Namespace) -> int:
    source = open(args.prompts, encoding="utf-8") if args.prompts not in (None, "-") else sys.stdin
    with source:
        lines = [line.rstrip("\n") for line in source if line.strip()]
    if not lines:
        print("rlloom: no prompts (one per line)", file=sys.stderr)
        return 2
    prompts = lines if args.raw else [[{"role": "user", "content": line}] for line in lines]
    with rollout_session(args.model, args.overrides) as session:
        rows = session.generate(prompts, args.n, session.seed)
    out = open(args.out, "w", encoding="utf-8") if args.out else sys.stdout
    with contextlib.nullcontext(out) if out is sys.stdout else out:
        for row in rows:
            out.write(json.dumps(row) + "\n")
    return 0


def command(parser: argparse.ArgumentParser) -> Callable[[argparse.Namespace], int]:
    """sample responses (text, token ids, log-probs) from a checkpoint or model

    Adds ``rlloom generate``'s arguments to ``parser``; returns :func:`cmd_generate`."""
    add_model_arguments(parser, (
        "One JSON line per response: prompt (as rendered), index, sample, response, token_ids, "
        "log_probs (the rollout engine's, at the sampling temperature). MODEL: a run folder, a checkpoint or a "
        "Hugging Face folder; overrides: sampling.temperature=0, sampling.max_new_tokens=64, trainer.seed=1, "
        "rollout=vllm, ..."))
    parser.add_argument("--prompts", help="file with one prompt per line (default: stdin)")
    parser.add_argument("-n", type=int, default=1, help="responses per prompt (default 1)")
    parser.add_argument("--raw", action="store_true", help="tokenize prompts as they are, without the chat template")
    parser.add_argument("--out", help="JSONL file (default: stdout)")
    return cmd_generate
