"""Padding-free forwards (``sequence_layout`` ``shared_prompt`` and ``packed``) against the padded
one and the plain concatenated transformers forward; micro-batches by token budget."""

from __future__ import annotations

import pytest
import torch

from rlloom import Batch
from rlloom_enginekit.packing import pack_rows
from rlloom_fsdp.scoring import model_input, score_responses
from test_fsdp_engine import (  # the shared fixtures and plain-transformers references
    LR,
    adamw_first_step,
    assert_weights_close,
    engines,  # noqa: F401 - pytest fixture
    make_batch,
    model_dir,  # noqa: F401 - pytest fixture
    one_thread,  # noqa: F401 - pytest fixture
    pg_loss,
    reference_forward,
    reference_gradients,
    reference_model,
)

PACKED = ("shared_prompt", "packed")
CUDA = pytest.mark.cuda("packed and shared-prompt layouts on the GPU")


def grouped_batch(groups: int = 3, n: int = 3) -> Batch:
    """``groups`` prompts of different lengths, ``n`` ragged responses each (one empty)."""
    batch = make_batch(rows=groups * n, seed=4)
    owner = torch.arange(groups * n) // n * n  # the first row of each group
    for name in ("prompts", "prompt_mask"):
        batch[name] = batch[name][owner]
    return batch


def record_forward_tokens(engine) -> list[int]:
    """Record the input size (slots) of every base-transformer forward the engine makes."""
    tokens: list[int] = []
    base = engine.model.base_model
    forward = base.forward

    def recording_forward(*args, **kwargs):
        tokens.append(int(kwargs["input_ids"].numel()))
        return forward(*args, **kwargs)

    base.forward = recording_forward
    return tokens


@pytest.mark.parametrize("attention", ["sdpa", "eager"])
@pytest.mark.parametrize("device", ["cpu", pytest.param("cuda", marks=CUDA)])
def test_packed_log_probs_entropy_and_gradients_equal_the_padded_forward(attention, device, model_dir):
    """The same model and loss through each layout: values and every parameter's gradient agree."""
    batch = grouped_batch().to(device)
    model = reference_model(model_dir).to(device)
    model.config._attn_implementation = attention
    results = {}
    for layout in ("padded", *PACKED):
        model.zero_grad()
        inputs = model_input(grouped_batch(), layout).to(torch.device(device))  # laid out on the CPU
        log_probs, entropy = score_responses(model, inputs, 0.7, True, 5)
        ((-batch["advantages"] * log_probs - 0.01 * entropy).sum() / batch["response_mask"].sum()).backward()
        results[layout] = (log_probs.detach(), entropy.detach(),
                           {name: p.grad.clone() for name, p in model.named_parameters()})
    padded_log_probs, padded_entropy, padded_grads = results["padded"]
    assert padded_log_probs.abs().sum() > 0
    for layout in PACKED:
        log_probs, entropy, grads = results[layout]
        torch.testing.assert_close(log_probs, padded_log_probs, atol=1e-5, rtol=0, msg=layout)
        torch.testing.assert_close(entropy, padded_entropy, atol=1e-5, rtol=0, msg=layout)
        for name, grad in padded_grads.items():
            torch.testing.assert_close(grads[name], grad, atol=1e-5, rtol=0, msg=f"{layout}: {name}")


@pytest.mark.parametrize("layout", PACKED)
def test_packed_engine_log_probs_match_plain_transformers(layout, model_dir, engines):
    batch = grouped_batch()
    engine = engines(model_dir, micro_batch_size=9, sequence_layout=layout)
    tokens = record_forward_tokens(engine)
    out = engine.compute_log_probs(batch, entropy=True)
    # One forward over the packing, fewer slots than the padded batch (and, shared, fewer than packed).
    slots = {name: pack_rows(batch, name == "shared_prompt").input_ids.numel() for name in PACKED}
    assert tokens == [slots[layout]]
    assert slots["shared_prompt"] < slots["packed"] < batch["prompts"].numel() + batch["responses"].numel()
    with torch.no_grad():
        expected_log_probs, expected_entropy = reference_forward(reference_model(model_dir), batch)
    torch.testing.assert_close(out["log_probs"], expected_log_probs, atol=1e-5, rtol=0)
    torch.testing.assert_close(out["entropy"], expected_entropy, atol=1e-5, rtol=0)


@pytest.mark.parametrize("layout", ["shared_prompt", "packed", "padded"])
@pytest.mark.parametrize("micro_batch_size", [9, 4])  # 4: a group is split across micro-batches
def test_train_step_in_every_layout_equals_hand_written_adamw(layout, micro_batch_size, model_dir, engines):
    batch = grouped_batch()
    engine = engines(model_dir, micro_batch_size=micro_batch_size, sequence_layout=layout)
    engine.train_step(batch, pg_loss)
    params, grads = reference_gradients(model_dir, batch)
    expected = {name: adamw_first_step(params[name], grads[name], LR) for name in params}
    assert_weights_close(dict(engine.named_weights()), expected, atol=1e-6)


def test_token_budget_micro_batches_give_the_update_of_one_big_batch(model_dir, engines):
    batch = grouped_batch()
    lengths = (batch["prompt_mask"].sum(1) + batch["response_mask"].sum(1)).tolist()
    budget = max(lengths)  # several micro-batches, each at most the longest row
    whole = engines(model_dir, micro_batch_size=len(batch))
    cut = engines(model_dir, micro_batch_size=len(batch), max_tokens_per_micro_batch=budget)
    forwards = record_forward_tokens(cut)
    whole_metrics = whole.train_step(batch, pg_loss)
    cut_metrics = cut.train_step(batch, pg_loss)
    assert len(forwards) > 1
    assert cut_metrics["rows"] == pytest.approx(len(batch) / len(forwards))  # averaged over micro-batches
    assert cut_metrics["grad_norm"] == pytest.approx(whole_metrics["grad_norm"], rel=1e-5)
    assert_weights_close(dict(cut.named_weights()), dict(whole.named_weights()), atol=1e-6)
    torch.testing.assert_close(cut.compute_log_probs(batch)["log_probs"],
                               whole.compute_log_probs(batch)["log_probs"], atol=1e-5, rtol=0)


def test_a_model_without_a_4d_mask_attention_is_told_to_use_the_padded_layout(model_dir):
    batch = grouped_batch()
    model = reference_model(model_dir)
    model.config._attn_implementation = "flash_attention_2"
    with pytest.raises(ValueError, match="sequence_layout=padded"):
        score_responses(model, model_input(batch, "shared_prompt"), 1.0, False, 5)


@pytest.mark.parametrize(("asked", "layout", "refused"), [
    ("flash_attention_2", "shared_prompt", True), ("flash_attention_2", "packed", True),
    ("flash_attention_2", "padded", False), ("sdpa", "shared_prompt", False), (None, "shared_prompt", False),
])
def test_the_models_attention_is_checked_before_weights_load(tmp_path, asked, layout, refused):
    """``check_model`` reads config.json's attn_implementation (transformers honours it) before loading."""
    import json

    from rlloom_fsdp import FSDPConfig

    config = {"model_type": "llama"} | ({"attn_implementation": asked} if asked else {})
    (tmp_path / "config.json").write_text(json.dumps(config))
    check = FSDPConfig(sequence_layout=layout).check_model
    if refused:
        with pytest.raises(ValueError, match=f"sequence_layout={layout} .*'flash_attention_2'.*sequence_layout=padded"):
            check(str(tmp_path), "cpu")
    else:
        check(str(tmp_path), "cpu")


def test_layout_is_validated():
    from rlloom_fsdp import FSDPConfig

    with pytest.raises(ValueError, match=r"sequence_layout must be one of \['shared_prompt', 'packed', 'padded'\]"):
        FSDPConfig(sequence_layout="varlen")
    with pytest.raises(ValueError, match="max_tokens_per_micro_batch must be >= 1"):
        FSDPConfig(max_tokens_per_micro_batch=0)
