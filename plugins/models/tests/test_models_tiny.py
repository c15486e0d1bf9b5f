"""``model=tiny``: folder contents, reload, deterministic weights, tokenizer, chat template."""

from __future__ import annotations

import os
import string

import pytest
import torch
from transformers import AutoModelForCausalLM, AutoTokenizer

from rlloom_models.config import TinyModelConfig
from rlloom_models.plugin import tiny

torch.set_num_threads(1)


@pytest.fixture(scope="module")
def cache(tmp_path_factory):
    return str(tmp_path_factory.mktemp("cache"))


@pytest.fixture(scope="module")
def folder(cache):
    return tiny(TinyModelConfig(cache_dir=cache))


def expected_param_count(cfg: TinyModelConfig, vocab: int) -> int:
    """Qwen2 with tied embeddings: q/k/v projections carry a bias, o_proj and the MLP do not."""
    h, i = cfg.hidden_size, cfg.intermediate_size
    kv = cfg.num_kv_heads * (h // cfg.num_heads)
    attention = (h * h + h) + 2 * (h * kv + kv) + h * h
    mlp = 3 * h * i
    norms = 2 * h
    return vocab * h + cfg.num_layers * (attention + mlp + norms) + h


def state(folder: str) -> dict[str, torch.Tensor]:
    return AutoModelForCausalLM.from_pretrained(folder).state_dict()


def test_folder_reloads_as_float32_qwen2(folder):
    cfg = TinyModelConfig()
    assert {"config.json", "model.safetensors", "tokenizer.json", "generation_config.json"} <= set(os.listdir(folder))
    model = AutoModelForCausalLM.from_pretrained(folder)
    assert type(model).__name__ == "Qwen2ForCausalLM"
    assert model.config.hidden_size == cfg.hidden_size
    assert model.config.num_hidden_layers == cfg.num_layers
    assert model.config.num_attention_heads == cfg.num_heads
    assert model.config.num_key_value_heads == cfg.num_kv_heads
    assert model.config.intermediate_size == cfg.intermediate_size
    assert model.config.max_position_embeddings == cfg.max_position_embeddings
    assert model.config.vocab_size == 259
    assert all(p.dtype == torch.float32 for p in model.parameters())
    assert model.lm_head.weight.data_ptr() == model.model.embed_tokens.weight.data_ptr()  # tied
    assert sum(p.numel() for p in model.parameters()) == expected_param_count(cfg, 259)


def test_param_count_for_another_shape(cache):
    cfg = TinyModelConfig(hidden_size=48, num_layers=3, num_heads=6, num_kv_heads=3, intermediate_size=80,
                          cache_dir=cache)
    model = AutoModelForCausalLM.from_pretrained(tiny(cfg))
    assert sum(p.numel() for p in model.parameters()) == expected_param_count(cfg, 259)


def test_same_config_same_folder_and_no_rebuild(folder, cache):
    weights = os.path.join(folder, "model.safetensors")
    before = os.stat(weights).st_mtime_ns
    assert tiny(TinyModelConfig(cache_dir=cache)) == folder
    assert os.stat(weights).st_mtime_ns == before


def test_weights_are_deterministic_for_a_seed(folder, cache, tmp_path):
    rebuilt = tiny(TinyModelConfig(cache_dir=str(tmp_path)))  # a fresh build in another cache
    assert os.path.basename(rebuilt) == os.path.basename(folder)
    a, b = state(folder), state(rebuilt)
    assert a.keys() == b.keys()
    assert all(torch.equal(a[k], b[k]) for k in a)

    other = tiny(TinyModelConfig(seed=1, cache_dir=cache))
    assert other != folder
    c = state(other)
    assert not torch.equal(a["model.embed_tokens.weight"], c["model.embed_tokens.weight"])


def test_build_leaves_global_rng_alone(tmp_path):
    torch.manual_seed(123)
    expected = torch.rand(3)
    torch.manual_seed(123)
    tiny(TinyModelConfig(seed=5, cache_dir=str(tmp_path)))
    assert torch.equal(torch.rand(3), expected)


def test_tokenizer_round_trips_and_ids_are_bytes(folder):
    tok = AutoTokenizer.from_pretrained(folder)
    ascii_text = string.digits + string.ascii_letters + string.punctuation + " \n" + "  two  spaces\n\nx"
    ids = tok(ascii_text).input_ids
    assert ids == list(ascii_text.encode())  # one token per character, id = code point, no BOS
    assert tok.decode(ids) == ascii_text
    unicode_text = "héllo ∑ 😀"
    assert tok.decode(tok(unicode_text).input_ids) == unicode_text
    assert len(tok) == 259


def test_special_tokens(folder):
    tok = AutoTokenizer.from_pretrained(folder)
    model = AutoModelForCausalLM.from_pretrained(folder)
    assert (tok.pad_token, tok.pad_token_id) == ("<pad>", 256)
    assert (tok.eos_token, tok.eos_token_id) == ("<eos>", 257)
    assert tok.bos_token is None
    assert model.generation_config.eos_token_id == 257
    assert model.generation_config.pad_token_id == 256
    ids = tok("ab<eos>").input_ids
    assert ids == [97, 98, 257]
    assert tok.decode(ids, skip_special_tokens=True) == "ab"


def test_chat_template(folder):
    tok = AutoTokenizer.from_pretrained(folder)
    user = [{"role": "user", "content": "What is 2+3?"}]
    assert tok.apply_chat_template(user, tokenize=False, add_generation_prompt=True) == (
        "user: What is 2+3?\nassistant: "
    )
    ids = tok.apply_chat_template(user, add_generation_prompt=True)["input_ids"]
    assert ids == list(b"user: What is 2+3?\nassistant: ")
    turn = [*user, {"role": "assistant", "content": "5"}]
    assert tok.apply_chat_template(turn, tokenize=False) == "user: What is 2+3?\nassistant: 5<eos>\n"


def test_generates_from_a_chat_prompt(folder):
    tok = AutoTokenizer.from_pretrained(folder)
    model = AutoModelForCausalLM.from_pretrained(folder)
    prompt = tok.apply_chat_template([{"role": "user", "content": "hi"}], add_generation_prompt=True,
                                     return_tensors="pt")
    out = model.generate(**prompt, max_new_tokens=6, do_sample=False)
    length = prompt["input_ids"].shape[1]
    assert 1 <= out.shape[1] - length <= 6
    assert torch.equal(out[0, :length], prompt["input_ids"][0])
    assert int(out[0, length:].max()) < 259


@pytest.mark.parametrize(
    "kwargs, field",
    [
        ({"hidden_size": 63}, "hidden_size"),
        ({"num_kv_heads": 3}, "num_kv_heads"),
        ({"num_layers": 0}, "num_layers"),
    ],
)
def test_invalid_config_names_the_field(kwargs, field):
    with pytest.raises(ValueError, match=f"model.{field}"):
        TinyModelConfig(**kwargs)
