"""``rlloom train [--config FILE] [--print-config] OVERRIDES...``: compose the run's config (a config error
is reported before torch loads), then train (:func:`rlloom_trainer.run.fit_run`) and print the final
validation and score metrics as JSON. Ctrl-C or SIGTERM prints one line (:mod:`rlloom_trainer.interrupt`) and
exits with status 128 + the signal's number (:data:`rlloom.cli.INTERRUPTED` for Ctrl-C, 143 for SIGTERM)."""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Callable

from rlloom.cli import INTERRUPTED
from rlloom.plugins.registry import get_registry

from rlloom_trainer.config_files import compose_with_file
from rlloom_trainer.record import record_yaml


def cmd_train(args: argparse.Namespace) -> int:
    """Train the run ``args`` describe; 0 when it finished (or had already finished)."""
    resolved = compose_with_file(args.config, args.overrides)
    for line in get_registry().load_warnings():
        print(f"rlloom: warning: {line} (rlloom plugins shows every plugin)", file=sys.stderr)
    if args.print_config:
        print(record_yaml(resolved, get_registry()))
        return 0
    from rlloom_trainer.interrupt import RunInterrupted, interrupt_message
    from rlloom_trainer.run import fit_run

    try:
        metrics = fit_run(resolved)
    except KeyboardInterrupt as interrupt:
        command = ["rlloom", "train", *(["--config", args.config] if args.config else []), *args.overrides]
        stopped = interrupt if isinstance(interrupt, RunInterrupted) else None
        print(interrupt_message(resolved, stopped.step if stopped else None, command), file=sys.stderr)
        return stopped.exit_status if stopped else INTERRUPTED
    summary = {k: v for k, v in metrics.items() if k.startswith("val-") or k == "critic/score/mean"}
    print(json.dumps(summary, indent=1, sort_keys=True))
    return 0


def command(parser: argparse.ArgumentParser) -> Callable[[argparse.Namespace], int]:
    """run training

    Adds ``rlloom train``'s arguments to ``parser``; returns :func:`cmd_train`."""
    parser.description = (
        "Run training. Overrides are Hydra syntax: group=option (algorithm=grpo, rollout=hf, "
        "train_engine=fsdp, reward=..., data=..., model=..., launcher=local, preset=tiny) and key=value "
        "(trainer.total_steps=20, algorithm.n=8, sampling.max_new_tokens=16).")
    parser.add_argument("overrides", nargs="*", help="Hydra overrides")
    parser.add_argument("--config", metavar="FILE",
                        help="a YAML of group choices and keys (choices: {algorithm: grpo}, trainer: {total_steps: "
                        "30}; a run's own config.yaml is one); the overrides win")
    parser.add_argument("--print-config", action="store_true",
                        help="print the composed config (with its choices and plugin versions) and exit")
    return cmd_train
