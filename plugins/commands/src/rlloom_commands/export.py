"""``rlloom export RUN_OR_CHECKPOINT [--out DIR]``: a checkpoint's policy as a Hugging Face folder that
``AutoModelForCausalLM.from_pretrained`` loads (:func:`export_checkpoint`)."""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Callable

from rlloom.config import ConfigError

from rlloom_commands.targets import resolve_target


def export_checkpoint(checkpoint_dir: str, out_dir: str) -> str:
    """Write the actor of the complete run checkpoint ``checkpoint_dir`` (``.../global_step_<N>``)
    as the Hugging Face folder ``out_dir``; returns its path.

    The checkpoint is loaded into a fresh train engine of the kind that wrote it (its saved
    ``train_engine`` choice and config), in this one process, whose full weights are then saved
    with :func:`rlloom.export.save_hf_folder` over the run's base model folder (config, tokenizer),
    which must still exist. An engine config class may name the settings one process needs
    (:class:`rlloom.protocols.LoadsInOneProcess`); they replace the saved ones."""
    from omegaconf import OmegaConf

    from rlloom.export import save_hf_folder
    from rlloom.plugins.registry import get_registry
    from rlloom.protocols import LoadsInOneProcess
    from rlloom.run_state import TrainerState
    from rlloom.types import EngineSpec

    state = TrainerState.read(checkpoint_dir)
    model_path = state.model_path
    if not os.path.isdir(model_path):
        raise FileNotFoundError(
            f"the run's base model folder {model_path!r} (config and tokenizer for the export) no longer exists"
        )
    choice = state.choices["train_engine"]
    component = get_registry().get("train_engine", choice)
    overrides = component.config.single_process_overrides if isinstance(component.config, LoadsInOneProcess) else {}
    cfg = OmegaConf.to_object(OmegaConf.merge(OmegaConf.structured(component.config), state.config["train_engine"],
                                              overrides))
    spec = EngineSpec(model_path, "actor", int(state.config["trainer"]["seed"]), state.optimizer_steps)
    engine = component.factory(cfg, spec)
    try:
        engine.load(os.path.join(checkpoint_dir, "actor"))
        return save_hf_folder(engine.named_weights(), model_path, out_dir)
    finally:
        engine.close()


def cmd_export(args: argparse.Namespace) -> int:
    """Export the checkpoint ``args.checkpoint`` names; print the folder written (stdout) and what it is (stderr)."""
    from rlloom.controller.local import quiet_transformers

    target = resolve_target(args.checkpoint)
    if target.checkpoint is None:
        raise ConfigError(f"{args.checkpoint!r} is already a Hugging Face model folder; export takes a run folder or "
                          f"a checkpoint")
    quiet_transformers()
    out = export_checkpoint(target.checkpoint, args.out or os.path.join(target.run_dir, "export"))
    print(f"rlloom: wrote the policy of {target.checkpoint} (step {target.step}) to {out}, a Hugging Face folder "
          f"for AutoModelForCausalLM.from_pretrained", file=sys.stderr)
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
    return cmd_export
