"""What a rollout engine plugin owes rlloom (:class:`rlloom.protocols.RolloutEngine`): :class:`RolloutEngineContract`."""

from __future__ import annotations

from typing import ClassVar

import pytest

from rlloom_trainer.contracts.plugin import EngineContract
from rlloom_trainer.contracts.reference import padded, plain_log_probs, plain_model

PROMPTS = ("Q: 2+2=?\nA:", "A much longer prompt, so that the short one is left-padded beside it:")
LOG_PROB_ATOL = 1e-3
"""Float32 on a CPU: the engine's log-probs and a plain forward's agree to rounding."""


class RolloutEngineContract(EngineContract):
    """``rollout=<name>``, built on the tiny model on the CPU, generates as the protocol says: ``n``
    interleaved samples per prompt with every input field repeated; right-padded responses whose mask is a
    prefix ending at a stop token or ``max_new_tokens``, log-probs 0 off the mask; the same response for a
    prompt whether or not a longer one left-pads it; the seed contract; and ``rollout_log_probs`` equal to
    log softmax(logits / T) of a plain transformers forward at the sampled tokens."""

    kind: ClassVar[str] = "rollout"
    engine_role: ClassVar[str] = "rollout"

    @pytest.fixture(scope="class")
    @classmethod
    def tokenizer(cls, rlloom_tiny_model):
        from transformers import AutoTokenizer

        return AutoTokenizer.from_pretrained(rlloom_tiny_model)

    def prompts(self, tokenizer, texts):
        """The texts as a left-padded prompt batch, with a ``tag`` field [B] (the row's index) to follow."""
        import torch
        from rlloom import Batch

        ids, mask = padded([tokenizer(text, add_special_tokens=False)["input_ids"] for text in texts],
                           tokenizer.pad_token_id, left=True)
        return Batch({"prompts": ids, "prompt_mask": mask, "tag": torch.arange(len(texts))})

    def test_n_interleaved_samples_repeat_every_input_field(self, engine, tokenizer):
        from rlloom import SamplingParams

        out = engine.generate(self.prompts(tokenizer, PROMPTS), SamplingParams(n=3, max_new_tokens=6, seed=1))
        assert len(out) == 6 and out["tag"].tolist() == [0, 0, 0, 1, 1, 1]
        assert out["prompts"].shape[0] == 6 and out["responses"].shape == out["response_mask"].shape
        assert out["responses"].shape[1] <= 6 and out["rollout_log_probs"].shape == out["responses"].shape
        assert out.meta["temperature"] == 1.0 and out.meta["pad_token_id"] == tokenizer.pad_token_id

    def test_responses_stop_at_a_stop_token_and_are_right_padded(self, engine, tokenizer):
        from rlloom import SamplingParams

        greedy = SamplingParams(temperature=0.0, max_new_tokens=8)
        free = engine.generate(self.prompts(tokenizer, PROMPTS[:1]), greedy)
        length = int(free["response_mask"][0].sum())
        assert length >= 3, "the greedy response ended before 3 tokens: no token to stop at"
        stop = int(free["responses"][0, 2])
        first = free["responses"][0, :length].tolist().index(stop)
        stopped = engine.generate(self.prompts(tokenizer, PROMPTS[:1]),
                                  SamplingParams(temperature=0.0, max_new_tokens=8, stop_token_ids=(stop,)))
        assert int(stopped["response_mask"][0].sum()) == first + 1, "the response did not end at its stop token"
        assert stopped["responses"][0, :first + 1].tolist() == free["responses"][0, :first + 1].tolist()
        sampled = engine.generate(self.prompts(tokenizer, PROMPTS), SamplingParams(n=8, max_new_tokens=16, seed=3))
        for responses, mask, log_probs in zip(sampled["responses"], sampled["response_mask"],
                                              sampled["rollout_log_probs"]):
            kept = int(mask.sum())
            assert mask.tolist() == [1] * kept + [0] * (len(mask) - kept), "the mask is not a prefix"
            assert set(responses[kept:].tolist()) <= {tokenizer.pad_token_id}
            assert log_probs[kept:].abs().sum() == 0
            assert tokenizer.eos_token_id not in responses[:kept - 1].tolist(), "tokens after EOS"
            if kept < 16:
                assert int(responses[kept - 1]) == tokenizer.eos_token_id, "a response ended early without EOS"

    def test_a_left_padded_prompt_gets_the_response_it_gets_alone(self, engine, tokenizer):
        from rlloom import SamplingParams

        greedy = SamplingParams(temperature=0.0, max_new_tokens=8)
        alone = engine.generate(self.prompts(tokenizer, PROMPTS[:1]), greedy)
        padded = engine.generate(self.prompts(tokenizer, PROMPTS), greedy)
        assert padded["prompt_mask"][0, 0] == 0, "the first prompt is the shorter one: it must be padded"
        kept = int(alone["response_mask"][0].sum())
        assert int(padded["response_mask"][0].sum()) == kept
        assert padded["responses"][0, :kept].tolist() == alone["responses"][0, :kept].tolist()

    def test_the_seed_contract(self, engine, tokenizer):
        """Same seed, same samples; a call split by prompts (``first_prompt``) samples what the whole call
        does; another seed samples otherwise."""
        from rlloom import SamplingParams

        def sample(texts, seed, first_prompt=0):
            out = engine.generate(self.prompts(tokenizer, texts),
                                  SamplingParams(n=2, max_new_tokens=8, seed=seed, first_prompt=first_prompt))
            return [row[mask.bool()].tolist() for row, mask in zip(out["responses"], out["response_mask"])]

        whole = sample(PROMPTS, seed=5)
        assert sample(PROMPTS, seed=5) == whole
        assert sample(PROMPTS[1:], seed=5, first_prompt=1) == whole[2:]
        assert sample(PROMPTS, seed=6) != whole

    def test_log_probs_are_a_plain_forwards_at_the_sampled_tokens(self, engine, tokenizer, rlloom_tiny_model):
        import torch
        from rlloom import SamplingParams

        temperature = 0.7
        out = engine.generate(self.prompts(tokenizer, PROMPTS), SamplingParams(n=2, temperature=temperature,
                                                                              max_new_tokens=8, seed=2))
        model = plain_model(rlloom_tiny_model)
        for row in range(len(out)):
            kept = int(out["response_mask"][row].sum())
            expected = plain_log_probs(model, out["prompts"][row][out["prompt_mask"][row].bool()],
                                       out["responses"][row, :kept], temperature)
            got = out["rollout_log_probs"][row, :kept]
            assert torch.allclose(got, expected, atol=LOG_PROB_ATOL), (row, (got - expected).abs().max())
