"""A run checkpoint's policy as a Hugging Face folder (``rlloom export``, and ``eval``/``generate``/``chat``
on a checkpoint)."""

from __future__ import annotations

import os


def export_checkpoint(checkpoint_dir: str, out_dir: str) -> str:
    """Write the actor of the complete run checkpoint ``checkpoint_dir`` (``.../global_step_<N>``)
    as the Hugging Face folder ``out_dir``; returns its path.

    The checkpoint is loaded into a fresh train engine of the kind that wrote it (its saved
    ``train_engine`` choice and config), in this one process, whose full weights are then saved
    with :func:`rlloom_trainer.export.save_hf_folder` over the run's base model folder (config, tokenizer),
    which must still exist. An engine config class may name the settings one process needs
    (:class:`rlloom.protocols.LoadsInOneProcess`); they replace the saved ones."""
    from omegaconf import OmegaConf
    from rlloom.plugins.registry import get_registry
    from rlloom.protocols import LoadsInOneProcess
    from rlloom.types import EngineSpec
    from rlloom_trainer.export import save_hf_folder
    from rlloom_trainer.run_state import TrainerState

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
