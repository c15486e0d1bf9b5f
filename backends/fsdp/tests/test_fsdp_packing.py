"""Padding-free forwards (``sequence_layout`` ``shared_prompt`` and ``packed``) against the padded
one and the plain concatenated transformers forward; micro-batches by token budget."""

from __future__ import annotations

import pytest
import torch

from rlloom import Batch, EngineSpec
from rlloom_enginekit.packing import pack_rows
from rlloom_fsdp.attention import (
    FLEX,
    VARLEN,
    packing_block_mask,
    sequence_runs,
    use_attention,
    varlen_attention_forward,
)
from rlloom_fsdp.scoring import model_input, score_responses
from test_fsdp_devices import BF16_EPS, BF16_LOG_PROB_ATOL, BF16_UPDATE_GAP, BF16_WEIGHT_ATOL, relative_gap
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
CUDA_FLEX = pytest.mark.cuda("FlexAttention compiled on the GPU, forward and backward")


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


def score_layouts(model, device: str, attention: dict[str, str], grad: bool) -> dict:
    """``{layout: (log_probs, entropy, {name: gradient} or None)}`` of :func:`grouped_batch` through
    ``model`` in each layout of ``attention`` (its attention implementation there), under the loss
    −A·log π − 0.01·H per response token (backward only with ``grad``)."""
    batch = grouped_batch().to(device)
    results = {}
    for layout, implementation in attention.items():
        model.zero_grad()
        model.config._attn_implementation = implementation
        inputs = model_input(grouped_batch(), layout).to(torch.device(device))  # laid out on the CPU
        with torch.set_grad_enabled(grad):
            log_probs, entropy = score_responses(model, inputs, 0.7, True, 5)
        if grad:
            ((-batch["advantages"] * log_probs - 0.01 * entropy).sum() / batch["response_mask"].sum()).backward()
        grads = {name: p.grad.clone() for name, p in model.named_parameters()} if grad else None
        results[layout] = (log_probs.detach(), entropy.detach(), grads)
    return results


def assert_layouts_equal_padded(results: dict, atol: float) -> None:
    """Every layout of :func:`score_layouts`' ``results`` gives the padded layout's values (and
    gradients, when taken) within ``atol``."""
    padded_log_probs, padded_entropy, padded_grads = results.pop("padded")
    assert padded_log_probs.abs().sum() > 0
    for layout, (log_probs, entropy, grads) in results.items():
        torch.testing.assert_close(log_probs, padded_log_probs, atol=atol, rtol=0, msg=layout)
        torch.testing.assert_close(entropy, padded_entropy, atol=atol, rtol=0, msg=layout)
        for name, grad in (padded_grads or {}).items():
            torch.testing.assert_close(grads[name], grad, atol=atol, rtol=0, msg=f"{layout}: {name}")


@pytest.mark.parametrize("attention", ["sdpa", "eager"])
@pytest.mark.parametrize("device", ["cpu", pytest.param("cuda", marks=CUDA)])
def test_packed_log_probs_entropy_and_gradients_equal_the_padded_forward(attention, device, model_dir):
    """The same model and loss through each layout: values and every parameter's gradient agree."""
    model = reference_model(model_dir).to(device)
    results = score_layouts(model, device, dict.fromkeys(("padded", *PACKED), attention), grad=True)
    assert_layouts_equal_padded(results, atol=1e-5)


@pytest.mark.parametrize("device", ["cpu", pytest.param("cuda", marks=CUDA_FLEX)])
def test_flex_attention_equals_the_padded_sdpa_forward(device, model_dir):
    """``attention=flex`` (FlexAttention over the packing's block mask, K/V heads not repeated: the
    model has 4 query and 2 KV heads) in both packed layouts against the padded SDPA forward. On the
    CPU flex runs uncompiled and has no backward: log-probs and entropy; on CUDA it is compiled, and
    every parameter's gradient is compared too (one pack shape per layout: the compiled kernel also
    meets a second shape)."""
    model = reference_model(model_dir).to(device)
    use_attention(model, "flex", torch.device(device), trainable=False)
    results = score_layouts(model, device, {"padded": "sdpa"} | dict.fromkeys(PACKED, FLEX), grad=device == "cuda")
    assert_layouts_equal_padded(results, atol=1e-5)


@pytest.mark.parametrize("device", ["cpu", pytest.param("cuda", marks=CUDA)])
def test_varlen_attention_equals_the_padded_sdpa_forward(device, model_dir):
    """``attention=varlen`` (causal SDPA per run, K/V heads not repeated: 4 query and 2 KV heads) in
    both packed layouts against the padded SDPA forward: log-probs, entropy and every parameter's
    gradient (``grouped_batch``'s shared layout has responses after the first of a prompt, which
    attend to a copy of it)."""
    model = reference_model(model_dir).to(device)
    use_attention(model, "varlen", torch.device(device), trainable=True)
    assert any(run[0] < run[1] for runs in model_input(grouped_batch(), "shared_prompt").runs for run in runs)
    results = score_layouts(model, device, {"padded": "sdpa"} | dict.fromkeys(PACKED, VARLEN), grad=True)
    assert_layouts_equal_padded(results, atol=1e-5)


def test_sequence_runs_tile_the_tokens_and_attend_as_the_dense_mask():
    """``sequence_runs``: each run's ``[start, end)`` tiles a pack's tokens in order (the right padding
    left out), and "query q sees key j" over the runs — j in the run's context or in ``[start, q]`` —
    is the packing's dense mask on the real tokens, in both layouts; ``packed`` has one run per row,
    ``shared_prompt`` responses with their prompt as context."""
    batch = grouped_batch(groups=4, n=4)
    for share in (True, False):
        packing = pack_rows(batch, share_prompts=share)
        runs = sequence_runs(packing.segments, packing.owners)
        dense = packing.attention_mask()[:, 0]
        for pack, pack_runs in enumerate(runs):
            real = int((packing.segments[pack] >= 0).sum())
            assert [run[2] for run in pack_runs] == [0] + [run[3] for run in pack_runs[:-1]]
            assert pack_runs[-1][3] == real
            seen = torch.zeros(real, real, dtype=torch.bool)
            for context_start, context_end, start, end in pack_runs:
                seen[start:end, context_start:context_end] = True
                seen[start:end, start:end] = torch.ones(end - start, end - start, dtype=torch.bool).tril()
            assert torch.equal(seen, dense[pack, :real, :real])
        with_context = [run for pack_runs in runs for run in pack_runs if run[0] < run[1]]
        assert len(with_context) > 0 if share else (not with_context and sum(map(len, runs)) == len(batch))


def test_varlen_saves_no_slot_by_slot_tensor_for_backward(model_dir, engines):
    """What the training forward keeps for backward with ``attention=varlen`` holds no [W, W] tensor (the
    dense mask every layer of ``sdpa`` keeps: ``test_sdpa_layers_share_one_additive_mask``)."""
    engine = engines(model_dir, attention="varlen")
    assert engine.model.config._attn_implementation == VARLEN
    inputs = model_input(grouped_batch(), "shared_prompt")
    width = inputs.input_ids.shape[1]
    shapes: list[tuple[int, ...]] = []

    def keep(tensor: torch.Tensor) -> torch.Tensor:
        shapes.append(tuple(tensor.shape))
        return tensor

    with torch.autograd.graph.saved_tensors_hooks(keep, lambda tensor: tensor):
        engine.train_outputs(inputs, 1.0)
    assert shapes and not [shape for shape in shapes if shape[-2:].count(width) == 2]


@pytest.mark.parametrize(("kwargs", "message"), [
    ({"sliding_window": 4}, r"softcapping, sliding window or sinks; the model asks for \['sliding_window'\]"),
    ({"softcap": 30.0}, r"the model asks for \['softcap'\]: set train_engine.attention=sdpa"),
    ({"dropout": 0.1}, r"no attention dropout.*asks for dropout 0.1"),
    ({"sequence_runs": None}, r"attention=varlen needs a packed train_engine.sequence_layout"),
])
def test_varlen_refuses_what_it_cannot_compute(kwargs, message):
    """An attention the per-run causal SDPA cannot give (a window, softcapping, dropout) or no runs:
    a ValueError naming the key, not other numbers."""
    states = torch.zeros(1, 2, 4, 8)
    runs = kwargs.pop("sequence_runs", ((0, 0, 0, 4),))
    with pytest.raises(ValueError, match=message):
        varlen_attention_forward(None, states, states, states, None, sequence_runs=runs, **kwargs)


def test_flex_block_mask_skips_blocks_and_keeps_the_dense_mask():
    """The block mask of packs three 128-slot blocks wide: exactly the blocks holding a visible pair
    are kept (some below the diagonal are not: the work flex skips), and its token-level rule, read
    back densely, is the packing's dense mask."""
    packing = pack_rows(make_batch(rows=16, prompt_len=60, response_len=100, seed=3), share_prompts=False)
    packs, width = packing.segments.shape
    blocks = -(-width // 128)
    assert blocks == 3
    block_mask = packing_block_mask(packing.segments, packing.owners)
    dense = packing.attention_mask()
    slots = torch.arange(width)
    rebuilt = block_mask.mask_mod(torch.arange(packs)[:, None, None], 0, slots[:, None], slots[None, :])
    assert torch.equal(rebuilt.unsqueeze(1), dense)
    room = blocks * 128 - width
    occupied = torch.nn.functional.pad(dense[:, 0], (0, room, 0, room)).view(packs, blocks, 128, blocks, 128)
    occupied = occupied.any(dim=(2, 4))
    assert torch.equal(block_mask.to_dense()[:, 0].bool(), occupied)
    causal_blocks = torch.ones(blocks, blocks, dtype=torch.bool).tril()
    assert (causal_blocks & ~occupied).any()


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


@pytest.mark.parametrize("layout", PACKED)
def test_flex_reference_engine_on_the_cpu_matches_plain_transformers(layout, model_dir, engines):
    """A frozen (ref) engine with ``attention=flex`` runs its no-grad forward on the CPU: the model's
    attention is :data:`FLEX`, log-probs and entropy equal the plain float32 forward's."""
    batch = grouped_batch()
    engine = engines(model_dir, role="ref", micro_batch_size=4, sequence_layout=layout, attention="flex")
    assert engine.model.config._attn_implementation == FLEX
    out = engine.compute_log_probs(batch, entropy=True)
    with torch.no_grad():
        expected_log_probs, expected_entropy = reference_forward(reference_model(model_dir), batch)
    torch.testing.assert_close(out["log_probs"], expected_log_probs, atol=1e-5, rtol=0)
    torch.testing.assert_close(out["entropy"], expected_entropy, atol=1e-5, rtol=0)


@pytest.mark.parametrize("role", ["actor", "critic"])
def test_flex_refuses_to_train_on_the_cpu(role, model_dir):
    from rlloom_fsdp import FSDPConfig, FSDPTrainEngine

    cfg = FSDPConfig(attention="flex")
    with pytest.raises(ValueError, match="attention=flex trains on a CUDA GPU only .*train_engine.attention=sdpa"):
        cfg.check_model(model_dir, "cpu")
    with pytest.raises(ValueError, match="attention=flex trains on a CUDA GPU only"):
        FSDPTrainEngine(cfg, EngineSpec(model_dir, role))
    FSDPConfig(attention="sdpa").check_model(model_dir, "cpu")


@CUDA_FLEX
def test_flex_engine_on_cuda_trains_like_the_fp32_cpu_engine(model_dir, engines):
    """The default CUDA engine (bf16 compute under FSDP2) with ``attention=flex`` against the float32
    CPU engine with SDPA, on micro-batches of 4 rows (packs of three shapes; no-grad and training
    passes): log-probs, two steps' losses, the weights after them (the bf16 bounds of
    ``test_fsdp_devices``)."""
    batch = grouped_batch()
    gpu = engines(model_dir, device="cuda", eps=BF16_EPS, attention="flex")
    cpu = engines(model_dir, device="cpu", eps=BF16_EPS)
    assert gpu.compute_dtype == torch.bfloat16 and gpu.model.config._attn_implementation == FLEX
    start = dict(cpu.named_weights())
    out, expected = gpu.compute_log_probs(batch, entropy=True), cpu.compute_log_probs(batch, entropy=True)
    torch.testing.assert_close(out["log_probs"], expected["log_probs"], atol=BF16_LOG_PROB_ATOL, rtol=0)
    torch.testing.assert_close(out["entropy"], expected["entropy"], atol=BF16_LOG_PROB_ATOL, rtol=0)
    losses = [(gpu.train_step(batch, pg_loss)["loss_share"], cpu.train_step(batch, pg_loss)["loss_share"])
              for _ in range(2)]
    assert losses[1][0] < losses[0][0]
    assert [gpu_loss for gpu_loss, _ in losses] == pytest.approx([cpu_loss for _, cpu_loss in losses], abs=2e-2)
    trained = {name: tensor.cpu() for name, tensor in gpu.named_weights()}
    assert_weights_close(trained, dict(cpu.named_weights()), atol=BF16_WEIGHT_ATOL)
    assert relative_gap(trained, dict(cpu.named_weights()), start) < BF16_UPDATE_GAP


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

    with pytest.raises(ValueError, match=r"train_engine\.sequence_layout=.*: must be one of shared_prompt, packed, padded\."):
        FSDPConfig(sequence_layout="varlen")
    with pytest.raises(ValueError, match=r"train_engine\.attention=dense: must be one of sdpa, flex, varlen\."):
        FSDPConfig(attention="dense")
    for attention in ("flex", "varlen"):
        with pytest.raises(ValueError, match=f"attention={attention} needs a packed train_engine.sequence_layout"):
            FSDPConfig(attention=attention, sequence_layout="padded")
    with pytest.raises(ValueError, match="train_engine.max_tokens_per_micro_batch=.*: must be >= 1"):
        FSDPConfig(max_tokens_per_micro_batch=0)


def test_multi_turn_rows_are_read_whole_and_scored_on_sampled_tokens_in_every_layout(model_dir, engines):
    """An agent's trajectories: tokens 2-3 of each long response were inserted (a tool's answer:
    ``response_attention_mask`` 1, ``response_mask`` 0). Every layout reads them (later tokens' log-probs
    change when they are hidden) and scores only the sampled ones (0 on the inserted), with equal values."""
    batch = grouped_batch()
    attention = batch["response_mask"].clone()
    inserted = torch.zeros_like(attention, dtype=torch.bool)
    inserted[attention.sum(dim=1) >= 5, 2:4] = True
    assert inserted.sum() >= 4
    batch["response_attention_mask"], batch["response_mask"] = attention, attention.masked_fill(inserted, 0)
    results = {layout: engines(model_dir, micro_batch_size=9, sequence_layout=layout).compute_log_probs(batch)["log_probs"]
               for layout in ("padded", *PACKED)}
    for layout in PACKED:
        torch.testing.assert_close(results[layout], results["padded"], atol=1e-5, rtol=0, msg=layout)
    assert bool((results["padded"][inserted] == 0).all())
    unread = batch.exclude("response_attention_mask")  # the inserted tokens dropped from what the model reads
    later = batch["response_mask"].bool() & (torch.arange(attention.shape[1]) >= 4)
    changed = engines(model_dir, micro_batch_size=9, sequence_layout="padded").compute_log_probs(unread)["log_probs"]
    assert (changed[later] - results["padded"][later]).abs().max() > 1e-3
