"""``rlloom eval MODEL [overrides]``: the validation of a run, without training.

The run is built by :class:`rlloom_trainer.trainer.Trainer` from the checkpoint's own config (for a checkpoint or run
folder; the defaults for a Hugging Face folder) with ``model=hf`` pointing at the model's weights and the user's
overrides last, and :meth:`Trainer.validate` runs at the checkpoint's step: the same prompts, sampling seeds and
metrics (``val-core/<source>/acc/mean@k``, ``val-aux/...``) as the in-training validation of that step.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
from collections.abc import Callable

from rlloom_trainer.commands.targets import Target, add_model_arguments, model_folder, resolve_target, saved_overrides


def default_out(target: Target) -> str:
    """``<run>/eval/<checkpoint or folder name>.json``, next to the model rather than inside it."""
    base = target.run_dir or os.path.dirname(target.hf_folder)
    return os.path.join(base, "eval", f"{target.name}.json")


def evaluate(path: str, overrides: list[str]) -> tuple[Target, dict[str, float]]:
    """The validation metrics of the model ``path`` names (see
    :func:`~rlloom_trainer.commands.targets.resolve_target`)."""
    from rlloom.config import compose_config
    from rlloom_trainer.trainer import Trainer

    target = resolve_target(path)
    base = saved_overrides(target, overrides)
    compose_config(base + list(overrides))  # a bad override is reported before any model is exported
    with tempfile.TemporaryDirectory(prefix="rlloom-eval-") as run_dir, model_folder(target) as folder:
        resolved = compose_config([*base, "model=hf", f"model.path={folder}", f"trainer.run_dir={run_dir}",
                                   "trainer.resume=never", "trainer.trackers=[]", *overrides])
        trainer = Trainer(resolved)
        try:
            trainer.step = target.step  # sampling seeds derive from (seed, step)
            return target, trainer.validate()
        finally:
            trainer.close()


def cmd_eval(args: argparse.Namespace) -> int:
    target, metrics = evaluate(args.model, args.overrides)
    out = args.out or default_out(target)
    os.makedirs(os.path.dirname(os.path.abspath(out)), exist_ok=True)
    record = {"model": target.checkpoint or target.hf_folder, "step": target.step, "overrides": args.overrides,
              "metrics": metrics}
    with open(out, "w", encoding="utf-8") as handle:
        json.dump(record, handle, indent=1, sort_keys=True)
    for key, value in sorted(metrics.items()):
        print(f"{key} = {value:.4f}")
    print(f"rlloom: wrote {out}", file=sys.stderr)
    return 0


def command(parser: argparse.ArgumentParser) -> Callable[[argparse.Namespace], int]:
    """validation metrics of a checkpoint or model, without training

    Adds ``rlloom eval``'s arguments to ``parser``; returns :func:`cmd_eval`."""
    add_model_arguments(parser, (
        "Run the in-training validation (val-core/<source>/acc/mean@k, val-aux/...) on MODEL: a run "
        "folder (its latest checkpoint), a checkpoint (checkpoints/global_step_<N>, checkpoints/latest) or a Hugging "
        "Face model folder. A checkpoint's own config is the default; overrides change it (data=..., reward=..., "
        "trainer.val_n=4, trainer.val_temperature=1.0, trainer.val_max_prompts=16, rollout=vllm)."))
    parser.add_argument("--out", help="JSON file for the metrics (default: <run>/eval/<checkpoint>.json)")
    return cmd_eval
