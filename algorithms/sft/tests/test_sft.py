"""SFT's loss (by hand and through the FSDP engine against plain transformers), the demonstration
batch, the missing-demonstration error, the config and the registration."""

import contextlib

import numpy as np
import pytest
import torch
from rlloom.batch import Batch
from rlloom.config import ConfigError, compose_config
from rlloom.data import PromptRecord
from rlloom_trainer.prompts import PromptEncoder
from rlloom.types import EngineSpec
from rlloom_algokit.losses import mini_batch_stats
from rlloom_models.config import TinyModelConfig
from rlloom_models.plugin import tiny
from rlloom_models.tiny import build_tokenizer
from rlloom_sft import SFT, SFTConfig, demonstration_batch, demonstration_texts, make_sft_loss_fn
from rlloom_trainer.testing import entry_point_registry

PAD, EOS = 256, 257  # the tiny byte tokenizer: id = byte, then <pad>, <eos>


@pytest.fixture(scope="module")
def tokenizer():
    return build_tokenizer(256)


def prompt_batch(tokenizer, records):
    prompts = PromptEncoder(tokenizer, 64).encode(records)
    prompts["uid"] = [f"draw1-{i}" for i in range(len(records))]
    return prompts


def record(prompt, source="digits", ground_truth=None, **extra):
    return PromptRecord(prompt=prompt, ground_truth=ground_truth, data_source=source, extra=extra)


# ------------------------------------------------------------------------------------ the loss
def test_token_mean_loss_is_the_mean_nll_of_response_tokens():
    lp = np.array([[-0.5, -1.5, -2.0], [-0.25, np.nan, -1e9]])  # padding holds garbage
    mask = np.array([[1, 1, 1], [1, 0, 0]])
    expected = -(lp[0].sum() + lp[1, 0]) / 4
    log_probs = torch.tensor(lp, requires_grad=True)
    batch = Batch({"response_mask": torch.tensor(mask)})
    loss, metrics = make_sft_loss_fn(SFTConfig())(batch, {"log_probs": log_probs}, mini_batch_stats(torch.tensor(mask)))
    loss.backward()
    assert loss.item() == pytest.approx(expected, rel=1e-12)
    assert metrics == {"sft_loss": pytest.approx(expected, rel=1e-12)}
    np.testing.assert_array_equal(log_probs.grad.numpy(), -mask / 4)  # padding gets no gradient


@pytest.mark.parametrize("mode, expected", [
    ("seq-mean-token-mean", (3.0 / 2 + 4.0 / 1) / 2),  # mean over rows of each row's mean NLL
    ("seq-mean-token-sum", (3.0 + 4.0) / 2),
    ("seq-mean-token-sum-norm", (3.0 + 4.0) / (2 * 5)),  # the constant L = max_response_length = 5
])
def test_other_aggregations(mode, expected):
    log_probs = torch.tensor([[-1.0, -2.0, -7.0], [-4.0, -7.0, -7.0]])
    mask = torch.tensor([[1, 1, 0], [1, 0, 0]])
    cfg = SFTConfig(loss_agg_mode=mode, max_response_length=5)
    loss, _ = make_sft_loss_fn(cfg)(Batch({"response_mask": mask}), {"log_probs": log_probs}, mini_batch_stats(mask))
    assert loss.item() == pytest.approx(expected)


@pytest.mark.parametrize("mode", ["token-mean", "seq-mean-token-mean", "seq-mean-token-sum-norm"])
def test_micro_batch_shares_sum_to_the_mini_batch_loss(mode):
    g = torch.Generator().manual_seed(0)
    log_probs = -torch.rand(5, 4, generator=g) * 3
    mask = (torch.arange(4) < torch.tensor([4, 1, 3, 2, 4])[:, None]).long()
    loss_fn = make_sft_loss_fn(SFTConfig(loss_agg_mode=mode))
    stats = mini_batch_stats(mask)
    whole, _ = loss_fn(Batch({"response_mask": mask}), {"log_probs": log_probs}, stats)
    shares = [loss_fn(Batch({"response_mask": mask[rows]}), {"log_probs": log_probs[rows]}, stats)[0]
              for rows in (slice(0, 2), slice(2, 3), slice(3, 5))]
    assert float(sum(shares)) == pytest.approx(float(whole), rel=1e-6)


def reference_mean_nll(model_dir: str, batch: Batch) -> float:
    """Each row on its own, unpadded (real prompt tokens + response tokens): −Σ log p(response
    token | everything before it) / number of response tokens, with plain transformers."""
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32)
    total, count = 0.0, 0
    with torch.no_grad():
        for row in range(len(batch)):
            prompt = batch["prompts"][row][batch["prompt_mask"][row].bool()]
            response = batch["responses"][row][batch["response_mask"][row].bool()]
            logits = model(torch.cat([prompt, response])[None]).logits[0]
            predicted = torch.log_softmax(logits[len(prompt) - 1: -1], dim=-1)
            total -= float(predicted.gather(1, response[:, None]).sum())
            count += len(response)
    return total / count


def test_fsdp_engine_trains_on_the_nll_of_the_demonstrations_whatever_the_micro_batches(tmp_path, tokenizer):
    from rlloom_fsdp import FSDPConfig, FSDPTrainEngine

    model_dir = tiny(TinyModelConfig(cache_dir=str(tmp_path)))
    prompts = prompt_batch(tokenizer, [record("Q: pick a digit\nA:"), record("Q: say\nA:"),
                                       record("Q: name one digit\nA:"), record("hi")])
    batch, _ = demonstration_batch(prompts, [" 7", " a longer answer", "", " 12"], tokenizer, 256)
    expected = reference_mean_nll(model_dir, batch)
    weights = []  # Adam's first step is lr·g/(|g| + eps): a larger eps keeps float32 rounding in tiny g small
    for micro_batch_size in (4, 1):
        engine = FSDPTrainEngine(FSDPConfig(lr=1e-2, eps=1e-3, micro_batch_size=micro_batch_size),
                                 EngineSpec(model_dir, "actor", seed=0, total_train_steps=1))
        try:
            metrics = engine.train_step(batch, SFT(SFTConfig()).loss_fn)
            weights.append(dict(engine.named_weights()))
        finally:
            engine.close()
        if micro_batch_size == 4:  # one micro-batch: its own loss is the mini-batch's
            assert metrics["sft_loss"] == pytest.approx(expected, rel=1e-5)
    for name, tensor in weights[0].items():
        torch.testing.assert_close(weights[1][name], tensor, atol=1e-6, rtol=0, msg=name)


# --------------------------------------------------------------------------- the demonstrations
def test_demonstration_batch_ids_masks_eos_and_truncation(tokenizer):
    prompts = prompt_batch(tokenizer, [record("Q: a\nA:"), record("Q: longer\nA:"), record("x")])
    batch, truncated = demonstration_batch(prompts, [" 7", "hello", ""], tokenizer, max_length=3)
    assert batch["responses"].tolist() == [[ord(" "), ord("7"), EOS], [ord("h"), ord("e"), ord("l")], [EOS, PAD, PAD]]
    assert batch["response_mask"].tolist() == [[1, 1, 1], [1, 1, 1], [1, 0, 0]]
    assert batch["responses"].dtype == batch["response_mask"].dtype == torch.long
    assert truncated.tolist() == [False, True, False]  # " 7" + EOS fits exactly; "hello" lost its tail and EOS
    assert list(batch["response_text"]) == [" 7", "hel", ""]
    assert batch.meta["pad_token_id"] == PAD and "temperature" not in batch.meta
    for name in ("prompts", "prompt_mask"):  # the prompt batch's own fields, unchanged
        assert torch.equal(batch[name], prompts[name])
    assert list(batch["uid"]) == ["draw1-0", "draw1-1", "draw1-2"] and batch["prompts"][2, 0] == PAD

    wide, truncated = demonstration_batch(prompts, [" 7", "hello", ""], tokenizer, max_length=256)
    assert wide["responses"][1].tolist() == [*b"hello", EOS] and wide["response_mask"].shape == (3, 6)
    assert not truncated.any()


def test_demonstration_texts_from_extra_or_ground_truth(tokenizer):
    prompts = prompt_batch(tokenizer, [record("a", ground_truth=12, answer=" x"),
                                       record("b", ground_truth="y", answer="z")])
    assert demonstration_texts(prompts, "answer") == [" x", "z"]
    assert demonstration_texts(prompts, "ground_truth") == ["12", "y"]


def test_a_row_without_its_demonstration_is_a_clear_error(tokenizer):
    prompts = prompt_batch(tokenizer, [record("a", response="1"), record("b", source="files", other="2")])
    with pytest.raises(ConfigError) as error:
        demonstration_texts(prompts, "response")
    message = str(error.value)
    assert message.startswith("algorithm.response_key=response: training prompt 1 ")
    for part in ("data_source 'files'", "no key 'response'", "it has ['other']", "data.extra_columns=[response]",
                 "algorithm.response_key"):
        assert part in message, part
    with pytest.raises(ConfigError, match="training prompt 0 .* no ground truth"):
        demonstration_texts(prompts, "ground_truth")
    with pytest.raises(ConfigError, match="has a int under 'response'; a demonstration must be a string"):
        demonstration_texts(prompt_batch(tokenizer, [record("a", response=3)]), "response")


# -------------------------------------------------------------------------------------- the step
class RecordingContext:
    """What ``SFT.step`` may call of a StepContext; no generate, score or log-prob stages exist here."""

    def __init__(self, tokenizer):
        self.tokenizer, self.metrics, self.calls = tokenizer, {}, []

    @contextlib.contextmanager
    def timed(self, stage):
        yield

    def update_actor(self, batch, loss_fn, mini_batch_rows, epochs=1):
        self.calls.append(("update_actor", len(batch), mini_batch_rows, epochs))

    def sync_weights(self):
        self.calls.append(("sync_weights",))


@pytest.mark.parametrize("mini_batch_size, rows", [(0, 4), (2, 2)])
def test_step_trains_then_syncs_and_reports_the_demonstrations(tokenizer, mini_batch_size, rows):
    prompts = prompt_batch(tokenizer, [record(f"Q{i}", response=" " * i) for i in range(4)])
    ctx = RecordingContext(tokenizer)
    cfg = SFTConfig(ppo_mini_batch_size=mini_batch_size, ppo_epochs=3, max_response_length=3)
    metrics = SFT(cfg).step(ctx, prompts)
    assert ctx.calls == [("update_actor", 4, rows, 3), ("sync_weights",)]
    lengths = [1, 2, 3, 3]  # i spaces + EOS, cut to 3 (the last row loses its EOS)
    assert metrics["response_length/mean"] == pytest.approx(np.mean(lengths))
    assert (metrics["response_length/max"], metrics["response_length/min"]) == (3, 1)
    assert metrics["response_length/clip_ratio"] == 0.25
    assert metrics["perf/total_tokens"] == 4 * 2 + sum(lengths)  # "Q<i>": two prompt tokens each


# -------------------------------------------------------------------------- config, registration
def test_defaults_and_entry_point():
    cfg = SFTConfig()
    assert (cfg.response_key, cfg.max_response_length, cfg.loss_agg_mode, cfg.ppo_mini_batch_size,
            cfg.ppo_epochs) == ("response", 256, "token-mean", 0, 1)
    registry = entry_point_registry("sft")
    assert registry.get("algorithm", "sft").config is SFTConfig
    algorithm = registry.build("algorithm", "sft", cfg)
    assert isinstance(algorithm, SFT) and not algorithm.needs_reference and not algorithm.needs_critic


@pytest.mark.parametrize("override, message", [
    ("max_response_length=0", "algorithm.max_response_length=0: must be >= 1"),
    ("loss_agg_mode=mean", "algorithm.loss_agg_mode=mean: must be one of token-mean, seq-mean-token-sum, "
                           "seq-mean-token-mean, seq-mean-token-sum-norm."),
    ("ppo_mini_batch_size=-1", "algorithm.ppo_mini_batch_size=-1: must be >= 0"),
    ("ppo_epochs=0", "algorithm.ppo_epochs=0: must be >= 1"),
    ("response_key=''", "algorithm.response_key='': must name a key of the prompts' extra (or be 'ground_truth')"),
])
def test_invalid_values_are_config_errors_naming_the_key(override, message):
    with pytest.raises(ConfigError) as error:
        compose_config(["algorithm=sft", f"algorithm.{override}"])
    assert str(error.value) == message


def test_composes_with_the_tiny_preset():
    # preset=tiny sets algorithm.n=8 for the RL algorithms: a preset's key the chosen option lacks is skipped
    resolved = compose_config(["preset=tiny", "algorithm=sft", "algorithm.max_response_length=8",
                               "algorithm.response_key=ground_truth"])
    assert resolved.choices["algorithm"] == "sft"
    assert resolved.sections["algorithm"] == SFTConfig(response_key="ground_truth", max_response_length=8)
    with pytest.raises(ConfigError, match="algorithm.n: no such key in algorithm=sft"):
        compose_config(["preset=tiny", "algorithm=sft", "algorithm.n=8"])  # the user's own override is not skipped
