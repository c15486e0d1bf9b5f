"""``rlloom export RUN_OR_CHECKPOINT [--out DIR] [--merge]``: a checkpoint's policy as a Hugging Face folder that
``AutoModelForCausalLM.from_pretrained`` loads, or a LoRA run's adapters as a PEFT folder (merged into the full
model with ``--merge``) (:func:`rlloom_trainer.export.export_checkpoint`)."""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Callable

from rlloom.config import ConfigError

from rlloom_trainer.commands.targets import resolve_target


def cmd_export(args: argparse.Namespace) -> int:
    """Export the checkpoint ``args.checkpoint`` names; print the folder written (stdout) and what it is (stderr)."""
    from rlloom.controller.roles import quiet_transformers
    from rlloom_trainer.export import export_checkpoint  # imports torch: not when the parser is built

    target = resolve_target(args.checkpoint)
    if target.checkpoint is None:
        raise ConfigError(f"{args.checkpoint!r} is already a Hugging Face model folder; export takes a run folder or "
                          f"a checkpoint")
    quiet_transformers()
    out = export_checkpoint(target.checkpoint, args.out or os.path.join(target.run_dir, "export"), adapter=not args.merge)
    adapter = os.path.isfile(os.path.join(out, "adapter_config.json"))
    what = ("a PEFT LoRA adapter folder for peft.PeftModel.from_pretrained (--merge: the full model)" if adapter else
            "a Hugging Face folder for AutoModelForCausalLM.from_pretrained")
    print(f"rlloom: wrote the policy of {target.checkpoint} (step {target.step}) to {out}, {what}", file=sys.stderr)
    print(out)
    return 0


def command(parser: argparse.ArgumentParser) -> Callable[[argparse.Namespace], int]:
    """write a checkpoint's policy as a Hugging Face folder

    Adds ``rlloom export``'s arguments to ``parser``; returns :func:`cmd_export`."""
    parser.description = (
        "Export the actor of a checkpoint for AutoModelForCausalLM.from_pretrained: RUN_DIR (its latest "
        "checkpoint), RUN_DIR/checkpoints/latest or RUN_DIR/checkpoints/global_step_<N>.")
    parser.add_argument("checkpoint", metavar="RUN_OR_CHECKPOINT")
    parser.add_argument("--out", help="output folder (default: RUN_DIR/export)")
    parser.add_argument("--merge", action="store_true",
                        help="a LoRA run: write the full model with the adapters merged in, not the PEFT adapter folder")
    return cmd_export
