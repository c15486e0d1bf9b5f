"""``reward=model``: a tiny sequence-classification reward model, trained here on a toy preference
(responses with more digits are better), scores batches correctly and drives a GRPO run toward it."""

from __future__ import annotations

import os
import random

import pytest
import torch
from rlloom import Batch
from rlloom_models.tiny import build_tokenizer
from rlloom_rewards.model import ModelReward, ModelRewardConfig
from rlloom_trainer.testing import train_tiny, training_rows
from transformers import AutoModelForCausalLM, AutoTokenizer, Qwen2Config, Qwen2ForSequenceClassification

PROMPT = "Q: pick a digit\nA:"
CHARS = "0123456789abcdefghijklmnopqrstuvwxyzABCDEFGHIJ !?.,-+:;()"


def digit_share(text: str) -> float:
    return sum(c.isdigit() for c in text) / len(text) if text else 0.0


def random_response(rng: random.Random) -> str:
    digits = rng.randint(0, 4)
    chars = [rng.choice("0123456789") for _ in range(digits)] + [rng.choice(CHARS[10:]) for _ in range(4 - digits)]
    rng.shuffle(chars)
    return "".join(chars)


def build_reward_model(folder: str, num_labels: int = 1) -> None:
    tokenizer = build_tokenizer(256)
    config = Qwen2Config(
        vocab_size=len(tokenizer), hidden_size=32, num_hidden_layers=1, num_attention_heads=2,
        num_key_value_heads=1, intermediate_size=64, num_labels=num_labels, pad_token_id=tokenizer.pad_token_id,
        eos_token_id=tokenizer.eos_token_id, bos_token_id=None, tie_word_embeddings=False,
    )
    torch.manual_seed(0)
    Qwen2ForSequenceClassification(config).save_pretrained(folder)
    tokenizer.save_pretrained(folder)


def train_on_digit_preference(folder: str, steps: int = 100) -> float:
    """Bradley-Terry training, loss = -log sigmoid(r(chosen) - r(rejected)), on pairs of random
    responses where the one with the larger share of digits is chosen; returns the held-out pair
    accuracy."""
    tokenizer = AutoTokenizer.from_pretrained(folder)
    model = Qwen2ForSequenceClassification.from_pretrained(folder, dtype=torch.float32)
    optimizer = torch.optim.AdamW(model.parameters(), lr=3e-3)
    rng = random.Random(0)

    def pairs(n: int) -> tuple[list[str], list[str]]:
        chosen, rejected = [], []
        while len(chosen) < n:
            a, b = random_response(rng), random_response(rng)
            if digit_share(a) != digit_share(b):
                better, worse = (a, b) if digit_share(a) > digit_share(b) else (b, a)
                chosen.append(PROMPT + better)
                rejected.append(PROMPT + worse)
        return chosen, rejected

    def rewards(texts: list[str]) -> torch.Tensor:
        encoded = tokenizer(texts, return_tensors="pt", padding=True)
        return model(**encoded).logits[:, 0]

    model.train()
    for _ in range(steps):
        chosen, rejected = pairs(32)
        loss = -torch.nn.functional.logsigmoid(rewards(chosen) - rewards(rejected)).mean()
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
    model.eval()
    with torch.no_grad():
        chosen, rejected = pairs(200)
        accuracy = float((rewards(chosen) > rewards(rejected)).float().mean())
    model.save_pretrained(folder)
    return accuracy


@pytest.fixture(scope="module")
def reward_model(tmp_path_factory) -> str:
    folder = str(tmp_path_factory.mktemp("reward-model"))
    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # module fixtures run before the per-test one-thread fixture
    try:
        build_reward_model(folder)
        assert train_on_digit_preference(folder) > 0.9
    finally:
        torch.set_num_threads(threads)
    return folder


def test_batched_scores_match_one_text_at_a_time(reward_model):
    texts = ["7", "a longer response 12", "", "xyz", "99999 9"]
    prompts = ["Q: one\nA:", "Q: two, longer\nA:", "Q: three\nA:", "Q:\nA:", "Q: five\nA:"]
    reward = ModelReward(ModelRewardConfig(path=reward_model, batch_size=2))
    scores = reward(Batch(objects={"response_text": texts, "prompt_text": prompts})).scores
    model = Qwen2ForSequenceClassification.from_pretrained(reward_model, dtype=torch.float32).eval()
    with torch.no_grad():
        expected = [float(model(input_ids=torch.tensor([[ord(c) for c in p + t]])).logits[0, 0])
                    for p, t in zip(prompts, texts, strict=True)]
    assert torch.allclose(scores, torch.tensor(expected), atol=1e-5)
    alone = ModelReward(ModelRewardConfig(path=reward_model, include_prompt=False))
    with torch.no_grad():
        first = float(model(input_ids=torch.tensor([[ord(c) for c in texts[0]]])).logits[0, 0])
    assert alone(Batch(objects={"response_text": texts[:1]})).scores.item() == pytest.approx(first, abs=1e-5)


def test_reward_model_folder_is_checked(tmp_path):
    with pytest.raises(ValueError, match="reward.path"):
        ModelReward(ModelRewardConfig(path=str(tmp_path / "missing")))
    build_reward_model(str(tmp_path), num_labels=2)
    with pytest.raises(ValueError, match="num_labels=2"):
        ModelReward(ModelRewardConfig(path=str(tmp_path)))


def sampled_digit_share(model_folder: str, samples: int = 64) -> float:
    """Mean digit share of ``samples`` responses (4 tokens, temperature 1) to the digits prompt."""
    tokenizer = AutoTokenizer.from_pretrained(model_folder)
    model = AutoModelForCausalLM.from_pretrained(model_folder, dtype=torch.float32).eval()
    ids = torch.tensor([[ord(c) for c in PROMPT]] * samples)
    torch.manual_seed(1)
    with torch.no_grad():
        out = model.generate(ids, attention_mask=torch.ones_like(ids), do_sample=True, max_new_tokens=4,
                             top_k=0, top_p=1.0, pad_token_id=tokenizer.pad_token_id)
    texts = tokenizer.batch_decode(out[:, ids.shape[1]:], skip_special_tokens=True)
    return sum(digit_share(t) for t in texts) / samples


def test_grpo_on_the_reward_model_moves_the_policy_toward_its_preference(reward_model, tmp_path, tiny_model_path):
    run_dir = str(tmp_path / "run")
    train = training_rows(train_tiny(run_dir, "reward=model", f"reward.path={reward_model}", "trainer.total_steps=15",
                                     cache_dir=os.path.dirname(tiny_model_path)))
    first = sum(row["critic/score/mean"] for row in train[:3]) / 3
    last = sum(row["critic/score/mean"] for row in train[-3:]) / 3
    assert last > first + 2.0, (first, last)  # the reward model's own score rises
    before, after = sampled_digit_share(tiny_model_path), sampled_digit_share(os.path.join(run_dir, "final_model"))
    assert after > before + 0.4, (before, after)  # and the policy really writes more digits
