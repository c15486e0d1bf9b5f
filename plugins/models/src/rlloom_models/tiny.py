"""``model=tiny``: a random-init Qwen2-style causal LM with an offline byte-level tokenizer.

The tokenizer is a Qwen2 byte-level BPE with no merges: token id ``b`` (0-255) is the byte ``b``,
so every ASCII character (digits, letters, punctuation, space, newline, ...) is one token whose id
is its code point, other characters are their UTF-8 bytes, and ``decode(encode(text)) == text``
for any NFC-normalised text. Ids 256, 257, 258 are ``<pad>``, ``<eos>``, ``<unk>`` (``<unk>`` is
never produced; it is declared so that the reloaded ``Qwen2Tokenizer`` does not add its own).
No BOS is added. A Qwen2 folder is always loaded by ``AutoTokenizer`` as ``Qwen2Tokenizer``,
which rebuilds a byte-level BPE from the vocabulary: a different kind of tokenizer (e.g. a
WordLevel one) would lose its pre-tokenizer and decoder on reload.

The chat template renders each message as ``"<role>: <content>\\n"``, an assistant message
followed by ``<eos>`` before its newline, and the generation prompt as ``"assistant: "``.

The folder is cached under ``models/tiny-<hash>`` where the hash covers the config (``cache_dir``
aside) and :data:`BUILD_VERSION`, so a config always maps to the same folder and weights.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
from pathlib import Path

import torch
from transformers import GenerationConfig, Qwen2Config, Qwen2ForCausalLM, Qwen2Tokenizer
from transformers.convert_slow_tokenizer import bytes_to_unicode

from rlloom_models.cache import cached_folder
from rlloom_models.config import TinyModelConfig

PAD, EOS, UNK = "<pad>", "<eos>", "<unk>"
CHAT_TEMPLATE = (
    "{% for message in messages %}"
    "{{ message['role'] + ': ' + message['content'] }}"
    "{% if message['role'] == 'assistant' %}{{ eos_token }}{% endif %}"
    "{{ '\\n' }}"
    "{% endfor %}"
    "{% if add_generation_prompt %}{{ 'assistant: ' }}{% endif %}"
)
BUILD_VERSION = 1  # bump when the folder this module writes changes for the same config


def build_tokenizer(max_length: int) -> Qwen2Tokenizer:
    """The byte tokenizer described in the module docstring."""
    byte_symbols = bytes_to_unicode()  # byte -> the printable character byte-level BPE uses for it
    vocab = {byte_symbols[byte]: byte for byte in range(256)}
    vocab.update({PAD: 256, EOS: 257, UNK: 258})
    return Qwen2Tokenizer(
        vocab=vocab,
        merges=[],
        unk_token=UNK,
        eos_token=EOS,
        pad_token=PAD,
        chat_template=CHAT_TEMPLATE,
        model_max_length=max_length,
    )


def build_model(cfg: TinyModelConfig, tokenizer: Qwen2Tokenizer) -> Qwen2ForCausalLM:
    """A float32 Qwen2 model with tied embeddings, initialised from ``cfg.seed`` (the caller's
    global RNG state is left untouched)."""
    config = Qwen2Config(
        vocab_size=len(tokenizer),
        hidden_size=cfg.hidden_size,
        num_hidden_layers=cfg.num_layers,
        num_attention_heads=cfg.num_heads,
        num_key_value_heads=cfg.num_kv_heads,
        intermediate_size=cfg.intermediate_size,
        max_position_embeddings=cfg.max_position_embeddings,
        tie_word_embeddings=True,
        pad_token_id=tokenizer.pad_token_id,
        eos_token_id=tokenizer.eos_token_id,
        bos_token_id=None,
        dtype="float32",
    )
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(cfg.seed)
        model = Qwen2ForCausalLM(config)
    model.generation_config = GenerationConfig(
        eos_token_id=tokenizer.eos_token_id, pad_token_id=tokenizer.pad_token_id
    )
    return model.float()


def config_hash(cfg: TinyModelConfig) -> str:
    """12 hex digits identifying the folder ``cfg`` builds (``cache_dir`` is not part of it)."""
    fields = {k: v for k, v in dataclasses.asdict(cfg).items() if k != "cache_dir"}
    payload = json.dumps({"build_version": BUILD_VERSION, **fields}, sort_keys=True)
    return hashlib.sha256(payload.encode()).hexdigest()[:12]


def tiny_model_path(cfg: TinyModelConfig) -> str:
    """The cached folder of the tiny model ``cfg`` describes, built on first use."""

    def build(folder: Path) -> None:
        tokenizer = build_tokenizer(cfg.max_position_embeddings)
        build_model(cfg, tokenizer).save_pretrained(folder)
        tokenizer.save_pretrained(folder)

    return cached_folder(f"tiny-{config_hash(cfg)}", build, cfg.cache_dir)
