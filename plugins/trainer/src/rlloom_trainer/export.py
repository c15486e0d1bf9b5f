"""Write trained weights as a Hugging Face folder that ``AutoModelForCausalLM.from_pretrained`` loads:
the trainer's ``final_model`` (:func:`save_hf_folder`) and a checkpoint's policy (:func:`export_checkpoint`:
``rlloom export``, and ``eval``/``generate``/``chat`` on a checkpoint)."""

from __future__ import annotations

import os
import shutil
from collections.abc import Iterable

import torch
from rlloom.errors import RunFailedError

WEIGHT_SUFFIXES = (".safetensors", ".bin", ".pt", ".pth", ".gguf")
WEIGHT_INDEXES = ("model.safetensors.index.json", "pytorch_model.bin.index.json")


def save_hf_folder(named_weights: Iterable[tuple[str, torch.Tensor]], base_model_path: str, out_dir: str) -> str:
    """Copy ``base_model_path``'s config, tokenizer and generation files to ``out_dir`` and write
    ``named_weights`` (full tensors, HF names) as ``model.safetensors``. Written to a temporary folder
    and renamed, so ``out_dir`` is either absent or complete; a write that fails (a full disk) removes
    the temporary folder and raises :class:`~rlloom.errors.RunFailedError` naming ``out_dir`` and the
    cause (chained), with a previous ``out_dir`` left as it was."""
    from rlloom_enginekit.safetensors_dir import save_tensors

    tmp_dir = out_dir + ".tmp"
    shutil.rmtree(tmp_dir, ignore_errors=True)
    try:
        os.makedirs(tmp_dir)
        for name in os.listdir(base_model_path):
            source = os.path.join(base_model_path, name)
            if os.path.isfile(source) and not name.endswith(WEIGHT_SUFFIXES) and name not in WEIGHT_INDEXES:
                shutil.copy2(source, os.path.join(tmp_dir, name))
        tensors = {name: tensor.detach().to("cpu").contiguous().clone() for name, tensor in named_weights}
        save_tensors(tensors, os.path.join(tmp_dir, "model.safetensors"))
    except Exception as error:
        shutil.rmtree(tmp_dir, ignore_errors=True)
        first_line = (str(error).strip().splitlines() or [""])[0]
        raise RunFailedError(f"could not write the Hugging Face folder {out_dir} ({type(error).__name__}: "
                             f"{first_line}); nothing was left half-written") from error
    shutil.rmtree(out_dir, ignore_errors=True)
    os.replace(tmp_dir, out_dir)
    return out_dir


def export_checkpoint(checkpoint_dir: str, out_dir: str, adapter: bool = False) -> str:
    """Write the actor of the complete run checkpoint ``checkpoint_dir`` (``.../global_step_<N>``)
    as the Hugging Face folder ``out_dir``; returns its path. With
    ``adapter`` and a LoRA actor (``train_engine.lora.rank > 0``, an engine that
    :class:`~rlloom_enginekit.lora.SavesAdapter`), the adapters alone as a PEFT folder instead; otherwise
    the full weights (a LoRA actor's merged: W0 + (alpha/r)·B·A).

    The checkpoint is loaded into a fresh train engine of the kind that wrote it (its saved
    ``train_engine`` choice and config), in this one process, whose full weights are then saved
    with :func:`save_hf_folder` over the run's base model folder (config, tokenizer),
    which must still exist. An engine config class may name the settings one process needs
    (:class:`rlloom.protocols.LoadsInOneProcess`); they replace the saved ones."""
    from omegaconf import OmegaConf
    from rlloom.plugins.registry import get_registry
    from rlloom.protocols import LoadsInOneProcess
    from rlloom.types import EngineSpec
    from rlloom_enginekit.engine_config import TrainEngineConfig
    from rlloom_enginekit.lora import SavesAdapter
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
        if adapter and isinstance(cfg, TrainEngineConfig) and cfg.lora.enabled and isinstance(engine, SavesAdapter):
            return engine.save_adapter(out_dir, model_path)
        return save_hf_folder(engine.named_weights(), model_path, out_dir)
    finally:
        engine.close()
