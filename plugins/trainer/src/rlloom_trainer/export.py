"""Write trained weights as a Hugging Face folder that ``AutoModelForCausalLM.from_pretrained`` loads
(the trainer's ``final_model``; ``rlloom export`` of rlloom-commands writes a checkpoint's with it)."""

from __future__ import annotations

import os
import shutil
from collections.abc import Iterable

import torch

WEIGHT_SUFFIXES = (".safetensors", ".bin", ".pt", ".pth", ".gguf")
WEIGHT_INDEXES = ("model.safetensors.index.json", "pytorch_model.bin.index.json")


def save_hf_folder(named_weights: Iterable[tuple[str, torch.Tensor]], base_model_path: str, out_dir: str) -> str:
    """Copy ``base_model_path``'s config, tokenizer and generation files to ``out_dir`` and write
    ``named_weights`` (full tensors, HF names) as ``model.safetensors``. Written to a temporary folder
    and renamed, so ``out_dir`` is either absent or complete."""
    from safetensors.torch import save_file

    tmp_dir = out_dir + ".tmp"
    shutil.rmtree(tmp_dir, ignore_errors=True)
    os.makedirs(tmp_dir)
    for name in os.listdir(base_model_path):
        source = os.path.join(base_model_path, name)
        if os.path.isfile(source) and not name.endswith(WEIGHT_SUFFIXES) and name not in WEIGHT_INDEXES:
            shutil.copy2(source, os.path.join(tmp_dir, name))
    tensors = {name: tensor.detach().to("cpu").contiguous().clone() for name, tensor in named_weights}
    save_file(tensors, os.path.join(tmp_dir, "model.safetensors"), metadata={"format": "pt"})
    shutil.rmtree(out_dir, ignore_errors=True)
    os.replace(tmp_dir, out_dir)
    return out_dir

