"""FSDPTrainEngine against independent plain-transformers / hand-written references.

A tiny random Qwen2 (hidden 64, 2 layers, vocab 64) is saved to a temporary folder; references
run the same weights through an unsharded ``Qwen2ForCausalLM`` and compute log-probs, gradients
and AdamW updates from the formulas.
"""

from __future__ import annotations

import math

import pytest
import torch
import torch.distributed as dist
import torch.multiprocessing as mp
from transformers import AutoModelForCausalLM, Qwen2Config, Qwen2ForCausalLM

from rlloom import Batch, EngineSpec
from rlloom.plugins.registry import Registry
from rlloom_fsdp import FSDPConfig, FSDPTrainEngine, process_group

VOCAB = 64
# Adam's first step is lr * g / (|g| + eps): with a tiny eps it amplifies float32 rounding in tiny
# gradients, so the tests use an eps that keeps that amplification (lr / eps) small.
LR, EPS = 1e-2, 1e-3


def tiny_qwen2(path, tie: bool = False) -> str:
    torch.manual_seed(0)
    config = Qwen2Config(
        vocab_size=VOCAB,
        hidden_size=64,
        intermediate_size=128,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=64,
        tie_word_embeddings=tie,
    )
    Qwen2ForCausalLM(config).save_pretrained(path)
    return str(path)


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory):
    return tiny_qwen2(tmp_path_factory.mktemp("qwen2"))


@pytest.fixture(scope="module")
def tied_model_dir(tmp_path_factory):
    return tiny_qwen2(tmp_path_factory.mktemp("qwen2_tied"), tie=True)


@pytest.fixture(autouse=True)
def one_thread():
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


@pytest.fixture
def engines():
    """Build engines through this; every one is closed after the test."""
    built = []

    def make(model_path: str, role: str = "actor", total_train_steps: int = 10, **overrides) -> FSDPTrainEngine:
        cfg = FSDPConfig(**{"lr": LR, "weight_decay": 0.1, "eps": EPS, "grad_clip": 0.0, "micro_batch_size": 4, **overrides})
        engine = FSDPTrainEngine(cfg, EngineSpec(model_path, role, seed=0, total_train_steps=total_train_steps))
        built.append(engine)
        return engine

    yield make
    for engine in built:
        engine.close()


def make_batch(rows: int = 6, prompt_len: int = 5, response_len: int = 7, seed: int = 1, temperature: float = 0.7):
    """Left-padded prompts, right-padded responses (one response empty), random advantages."""
    g = torch.Generator().manual_seed(seed)
    prompt_lengths = torch.randint(1, prompt_len + 1, (rows,), generator=g)
    response_lengths = torch.randint(1, response_len + 1, (rows,), generator=g)
    response_lengths[1] = 0
    response_lengths[0] = response_len
    positions_p = torch.arange(prompt_len)
    prompt_mask = (positions_p >= prompt_len - prompt_lengths[:, None]).long()
    response_mask = (torch.arange(response_len) < response_lengths[:, None]).long()
    prompts = torch.randint(0, VOCAB, (rows, prompt_len), generator=g) * prompt_mask
    responses = torch.randint(0, VOCAB, (rows, response_len), generator=g) * response_mask
    advantages = torch.randn(rows, response_len, generator=g) * response_mask
    return Batch(
        {
            "prompts": prompts,
            "prompt_mask": prompt_mask,
            "responses": responses,
            "response_mask": response_mask,
            "advantages": advantages,
        },
        meta={"temperature": temperature},
    )


def reference_forward(model, batch: Batch):
    """Plain transformers: log softmax(logits / T) at the response tokens, and the entropy; 0 on padding."""
    prompts, responses = batch["prompts"], batch["responses"]
    mask = batch["response_mask"]
    input_ids = torch.cat([prompts, responses], dim=1)
    attention_mask = torch.cat([batch["prompt_mask"], mask], dim=1)
    position_ids = (attention_mask.cumsum(1) - 1).clamp(min=0)
    logits = model(input_ids=input_ids, attention_mask=attention_mask, position_ids=position_ids).logits
    start = prompts.shape[1] - 1
    log_p = torch.log_softmax(logits[:, start : start + responses.shape[1]] / batch.meta["temperature"], dim=-1)
    log_probs = log_p.gather(-1, responses.unsqueeze(-1)).squeeze(-1) * mask
    entropy = -(log_p.exp() * log_p).sum(-1) * mask
    return log_probs, entropy


def reference_model(path: str):
    return AutoModelForCausalLM.from_pretrained(path, dtype=torch.float32)


def pg_objective(micro: Batch, outputs, stats) -> torch.Tensor:
    """Token-mean policy-gradient loss with an entropy bonus (this micro-batch's share)."""
    per_token = -micro["advantages"] * outputs["log_probs"] - 0.01 * outputs["entropy"]
    return (per_token * micro["response_mask"]).sum() / stats.num_tokens


def pg_loss(micro: Batch, outputs, stats):
    """:func:`pg_objective` with float metrics."""
    loss = pg_objective(micro, outputs, stats)
    return loss, {"loss_share": float(loss.detach()), "rows": float(len(micro))}


def reference_gradients(path: str, batch: Batch) -> tuple[dict[str, torch.Tensor], dict[str, torch.Tensor]]:
    """Parameters and gradients of the pg_loss on the whole batch, one unsharded model."""
    model = reference_model(path)
    log_probs, entropy = reference_forward(model, batch)
    mask = batch["response_mask"]
    loss = ((-batch["advantages"] * log_probs - 0.01 * entropy) * mask).sum() / mask.sum()
    loss.backward()
    params = {name: p.detach().clone() for name, p in model.named_parameters()}
    grads = {name: p.grad.detach().clone() for name, p in model.named_parameters()}
    return params, grads


def adamw_first_step(param, grad, lr, betas=(0.9, 0.999), eps=EPS, weight_decay=0.1):
    """One AdamW step from zero moments, written from the formula (decoupled weight decay)."""
    b1, b2 = betas
    m_hat = (1 - b1) * grad / (1 - b1)
    v_hat = (1 - b2) * grad * grad / (1 - b2)
    return param * (1 - lr * weight_decay) - lr * m_hat / (v_hat.sqrt() + eps)


def assert_weights_close(actual: dict, expected: dict, atol: float) -> None:
    assert sorted(actual) == sorted(expected)
    for name in expected:
        torch.testing.assert_close(actual[name], expected[name], atol=atol, rtol=0, msg=name)


# ---------------------------------------------------------------------------------- log-probs
def test_log_probs_and_entropy_match_plain_transformers(model_dir, engines):
    batch = make_batch()
    out = engines(model_dir, micro_batch_size=4).compute_log_probs(batch, entropy=True)
    with torch.no_grad():
        expected_log_probs, expected_entropy = reference_forward(reference_model(model_dir), batch)
    assert sorted(out.keys()) == ["entropy", "log_probs"]
    assert out["log_probs"].dtype == torch.float32 and out["log_probs"].shape == (6, 7)
    torch.testing.assert_close(out["log_probs"], expected_log_probs, atol=1e-5, rtol=0)
    torch.testing.assert_close(out["entropy"], expected_entropy, atol=1e-5, rtol=0)
    assert torch.all(out["log_probs"][1] == 0)  # empty response
    assert torch.all(out["log_probs"][0] < 0)  # full-length response


def test_temperature_defaults_to_one_and_must_be_positive(model_dir, engines):
    engine = engines(model_dir)
    batch = make_batch(temperature=1.0)
    untempered = Batch(dict(batch.tensors.items()))
    torch.testing.assert_close(
        engine.compute_log_probs(untempered)["log_probs"], engine.compute_log_probs(batch)["log_probs"]
    )
    with pytest.raises(ValueError, match="temperature"):
        engine.compute_log_probs(make_batch(temperature=0.0))


# ---------------------------------------------------------------------------------- training
@pytest.mark.parametrize("reshard_after_forward", [True, False])
def test_train_step_equals_hand_written_adamw(reshard_after_forward, model_dir, engines):
    batch = make_batch()
    engine = engines(model_dir, micro_batch_size=4, warmup_steps=2, reshard_after_forward=reshard_after_forward)
    metrics = engine.train_step(batch, pg_loss)
    params, grads = reference_gradients(model_dir, batch)
    lr = LR * 1 / 2  # first of two warm-up steps
    expected = {name: adamw_first_step(params[name], grads[name], lr) for name in params}
    assert_weights_close(dict(engine.named_weights()), expected, atol=1e-6)
    norm = math.sqrt(sum(float((g * g).sum()) for g in grads.values()))
    assert metrics["grad_norm"] == pytest.approx(norm, rel=1e-5)
    assert metrics["lr"] == pytest.approx(lr)
    assert metrics["skipped_update"] == 0.0
    assert metrics["rows"] == pytest.approx((4 + 2) / 2)  # averaged over the two micro-batches


def test_micro_batch_size_does_not_change_results(model_dir, engines):
    batch = make_batch()
    small, large = engines(model_dir, micro_batch_size=1), engines(model_dir, micro_batch_size=4)
    torch.testing.assert_close(
        small.compute_log_probs(batch)["log_probs"], large.compute_log_probs(batch)["log_probs"], atol=1e-6, rtol=0
    )
    small_metrics, large_metrics = small.train_step(batch, pg_loss), large.train_step(batch, pg_loss)
    assert small_metrics["grad_norm"] == pytest.approx(large_metrics["grad_norm"], rel=1e-5)
    assert_weights_close(dict(small.named_weights()), dict(large.named_weights()), atol=1e-6)


def test_gradient_clipping_limits_the_update(model_dir, engines):
    batch = make_batch()
    params, grads = reference_gradients(model_dir, batch)
    norm = math.sqrt(sum(float((g * g).sum()) for g in grads.values()))
    clip, eps = norm / 4, 1e-2  # a large eps makes Adam's step depend on the gradient's scale
    engine = engines(model_dir, grad_clip=clip, eps=eps)
    metrics = engine.train_step(batch, pg_loss)
    assert metrics["grad_norm"] == pytest.approx(norm, rel=1e-5)
    scale = clip / (norm + 1e-6)
    clipped = {n: adamw_first_step(params[n], grads[n] * scale, LR, eps=eps) for n in params}
    unclipped = {n: adamw_first_step(params[n], grads[n], LR, eps=eps) for n in params}
    assert max(float((clipped[n] - unclipped[n]).abs().max()) for n in params) > 1e-5
    assert_weights_close(dict(engine.named_weights()), clipped, atol=1e-6)


def test_gradient_checkpointing_gives_the_same_step(model_dir, engines):
    batch = make_batch()
    plain, checkpointed = engines(model_dir), engines(model_dir, gradient_checkpointing=True)
    calls = {"plain": 0, "checkpointed": 0}
    for name, engine in (("plain", plain), ("checkpointed", checkpointed)):
        mlp = engine.model.model.layers[0].mlp  # runs inside the (checkpointed) layer forward
        # Count calls of its forward (module hooks do not fire when checkpointing recomputes).
        def counting_forward(*args, _name=name, _forward=mlp.forward):
            calls[_name] += 1
            return _forward(*args)

        mlp.forward = counting_forward
    plain.train_step(batch, pg_loss)
    checkpointed.train_step(batch, pg_loss)
    assert calls == {"plain": 2, "checkpointed": 4}  # two micro-batches; recomputed in backward
    assert_weights_close(dict(checkpointed.named_weights()), dict(plain.named_weights()), atol=1e-6)


def test_lr_warmup_then_cosine_schedule(model_dir, engines):
    engine = engines(model_dir, total_train_steps=6, warmup_steps=3, lr_schedule="cosine", min_lr_ratio=0.1)
    batch = make_batch(rows=2)

    def zero_loss(micro, outputs, stats):
        return outputs["log_probs"].sum() * 0.0, {}

    lrs = [engine.train_step(batch, zero_loss)["lr"] for _ in range(7)]
    # warm-up k/3; then 0.1 + 0.9 * (1 + cos(pi * p)) / 2 with p = 0, 1/3, 2/3, then the floor
    expected = [LR * f for f in (1 / 3, 2 / 3, 1.0, 1.0, 0.775, 0.325, 0.1)]
    assert lrs == pytest.approx(expected, rel=1e-9)


def test_cosine_without_total_steps_is_rejected(model_dir):
    with pytest.raises(ValueError, match="total_steps > warmup_steps"):
        FSDPTrainEngine(FSDPConfig(lr_schedule="cosine"), EngineSpec(model_dir, "actor", total_train_steps=0))


def test_non_finite_loss_skips_the_update(model_dir, engines):
    engine = engines(model_dir)
    batch = make_batch()
    before = dict(engine.named_weights())

    def nan_loss(micro, outputs, stats):
        loss, metrics = pg_loss(micro, outputs, stats)
        return loss * float("nan"), metrics

    metrics = engine.train_step(batch, nan_loss)
    assert metrics["skipped_update"] == 1.0 and math.isnan(metrics["grad_norm"])
    assert_weights_close(dict(engine.named_weights()), before, atol=0)
    recovered = engine.train_step(batch, pg_loss)
    assert recovered["skipped_update"] == 0.0 and math.isfinite(recovered["grad_norm"])
    after = dict(engine.named_weights())
    assert any(not torch.equal(after[name], before[name]) for name in before)


# ---------------------------------------------------------------------------------- weights & checkpoints
@pytest.mark.parametrize("tied", [False, True], ids=["untied", "tied"])
def test_named_weights_round_trip_into_a_fresh_hf_model(tied, model_dir, tied_model_dir, engines):
    path = tied_model_dir if tied else model_dir
    engine = engines(path)
    batch = make_batch()
    engine.train_step(batch, pg_loss)  # weights now differ from the folder's
    weights = dict(engine.named_weights())
    assert all(t.device.type == "cpu" and t.dtype == torch.float32 for t in weights.values())

    torch.manual_seed(123)
    fresh = Qwen2ForCausalLM(Qwen2Config.from_pretrained(path))
    hf_names = list(fresh.state_dict())
    assert list(weights) == [n for n in hf_names if not (tied and n == "lm_head.weight")]
    result = fresh.load_state_dict(weights, strict=False)
    assert result.unexpected_keys == []
    assert result.missing_keys == (["lm_head.weight"] if tied else [])
    if tied:
        assert fresh.lm_head.weight is fresh.model.embed_tokens.weight
    with torch.no_grad():
        expected, _ = reference_forward(fresh.eval(), batch)
    torch.testing.assert_close(engine.compute_log_probs(batch)["log_probs"], expected, atol=1e-5, rtol=0)


def test_save_then_load_restores_the_next_step_exactly(model_dir, engines, tmp_path):
    engine = engines(model_dir, warmup_steps=4)
    batches = [make_batch(seed=s) for s in range(4)]
    engine.train_step(batches[0], pg_loss)
    engine.save(str(tmp_path / "ckpt"))
    saved = dict(engine.named_weights())
    first = [engine.train_step(b, pg_loss) for b in batches[1:]]
    first_weights = dict(engine.named_weights())

    engine.load(str(tmp_path / "ckpt"))
    assert_weights_close(dict(engine.named_weights()), saved, atol=0)
    second = [engine.train_step(b, pg_loss) for b in batches[1:]]
    assert second == first  # same metrics, LR position included
    assert_weights_close(dict(engine.named_weights()), first_weights, atol=0)

    # A fresh engine resumes the same way.
    resumed = engines(model_dir, warmup_steps=4)
    resumed.load(str(tmp_path / "ckpt"))
    assert [resumed.train_step(b, pg_loss) for b in batches[1:]] == first
    assert_weights_close(dict(resumed.named_weights()), first_weights, atol=0)


def test_load_rejects_a_folder_without_engine_state(model_dir, engines, tmp_path):
    with pytest.raises(FileNotFoundError, match="engine_state.json"):
        engines(model_dir).load(str(tmp_path))


# ---------------------------------------------------------------------------------- roles & lifecycle
def test_reference_role_is_frozen(model_dir, engines):
    ref = engines(model_dir, role="ref")
    assert ref.optimizer is None
    assert not any(p.requires_grad for p in ref.model.parameters())
    batch = make_batch()
    with torch.no_grad():
        expected, _ = reference_forward(reference_model(model_dir), batch)
    torch.testing.assert_close(ref.compute_log_probs(batch)["log_probs"], expected, atol=1e-5, rtol=0)
    with pytest.raises(RuntimeError, match="role 'ref'"):
        ref.train_step(batch, pg_loss)


def test_reference_save_load_round_trips(model_dir, engines, tmp_path):
    actor, ref = engines(model_dir), engines(model_dir, role="ref")
    actor.train_step(make_batch(), pg_loss)
    actor.save(str(tmp_path / "actor"))
    original = dict(ref.named_weights())
    ref.save(str(tmp_path / "ref"))
    ref.load(str(tmp_path / "actor"))  # model weights only; the actor's optimizer state is ignored
    assert_weights_close(dict(ref.named_weights()), dict(actor.named_weights()), atol=0)
    ref.load(str(tmp_path / "ref"))
    assert_weights_close(dict(ref.named_weights()), original, atol=0)
    with pytest.raises(ValueError, match="role 'ref' and holds no optimizer state"):
        actor.load(str(tmp_path / "ref"))


def test_unsupported_role_and_compute_values(model_dir, engines):
    with pytest.raises(ValueError, match="'rollout'"):
        engines(model_dir, role="rollout")
    with pytest.raises(RuntimeError, match="value head"):
        engines(model_dir).compute_values(make_batch())


def test_engines_share_one_process_group_until_the_last_closes(model_dir):
    if dist.is_initialized():
        pytest.skip("a process group created outside rlloom-fsdp exists; it is never destroyed by the engine")
    actor = FSDPTrainEngine(FSDPConfig(), EngineSpec(model_dir, "actor"))
    ref = FSDPTrainEngine(FSDPConfig(), EngineSpec(model_dir, "ref"))
    assert process_group.users() == 2 and dist.get_world_size() == 1
    actor.close()
    actor.close()  # idempotent
    assert dist.is_initialized() and process_group.users() == 1
    ref.compute_log_probs(make_batch())
    ref.close()
    assert not dist.is_initialized() and process_group.users() == 0


def test_plugin_registers_the_fsdp_train_engine():
    component = Registry().get("train_engine", "fsdp")
    assert component.config is FSDPConfig
    assert component.distribution == "rlloom-fsdp"


# ---------------------------------------------------------------------------------- world size 2
def _world_size_2_worker(rank: int, store_path: str, model_dir: str, batch: Batch, out_dir: str) -> None:
    torch.set_num_threads(1)
    dist.init_process_group("gloo", init_method=f"file://{store_path}", rank=rank, world_size=2)
    engine = FSDPTrainEngine(
        FSDPConfig(lr=LR, weight_decay=0.1, eps=EPS, grad_clip=1.0, micro_batch_size=2),
        EngineSpec(model_dir, "actor", total_train_steps=10),
    )
    local = batch.chunk(2)[rank]  # 3 rows (2 micro-batches) on rank 0, 2 rows (1) on rank 1
    metrics = engine.train_step(local, pg_loss)
    log_probs = engine.compute_log_probs(local)["log_probs"]
    weights = dict(engine.named_weights())
    engine.close()
    assert dist.is_initialized()  # the launcher's group outlives the engine
    dist.destroy_process_group()
    torch.save({"metrics": metrics, "log_probs": log_probs, "weights": weights}, f"{out_dir}/rank{rank}.pt")


@pytest.mark.timeout(300)  # a collective out of step between the ranks would hang
def test_world_size_2_matches_world_size_1(model_dir, engines, tmp_path):
    batch = make_batch(rows=5)
    for name in ("prompts", "prompt_mask"):  # rows 0 and 1 share a prompt: only rank 0's first micro-batch
        batch[name][1] = batch[name][0]      # repeats one, so the ranks must agree on the plain forward
    single = engines(model_dir, grad_clip=1.0, micro_batch_size=2)
    expected_metrics = single.train_step(batch, pg_loss)
    expected_log_probs = single.compute_log_probs(batch)["log_probs"]
    expected_weights = dict(single.named_weights())

    mp.start_processes(
        _world_size_2_worker,
        args=(str(tmp_path / "store"), model_dir, batch, str(tmp_path)),
        nprocs=2,
        join=True,
        start_method="spawn",
    )
    ranks = [torch.load(tmp_path / f"rank{rank}.pt") for rank in range(2)]

    assert expected_metrics["grad_norm"] > 1.0  # clipping is active in both runs
    for result in ranks:
        assert result["metrics"]["grad_norm"] == pytest.approx(expected_metrics["grad_norm"], rel=1e-5)
        assert result["metrics"]["rows"] == pytest.approx((1.5 + 2) / 2)  # rank means (2+1)/2 and 2/1, averaged
        # The same micro-batches' tokens over the ranks: rank 1's padding pass is not counted.
        assert result["metrics"]["perf/model_flops/actor"] == expected_metrics["perf/model_flops/actor"]
        assert_weights_close(result["weights"], expected_weights, atol=1e-5)
    log_probs = torch.cat([result["log_probs"] for result in ranks])
    torch.testing.assert_close(log_probs, expected_log_probs, atol=1e-5, rtol=0)


@pytest.mark.parametrize("zeroed", [[2, 3, 5], [0, 2, 3, 4, 5]])
def test_rows_with_zero_advantages_are_left_out_with_the_same_update(zeroed, model_dir, engines):
    """The policy loss names rows whose advantages are all 0 inert (zero gradient): the engine runs
    only the others (all inert: the first row alone), and the step equals training every row."""
    from rlloom_algokit.config import PolicyLossConfig
    from rlloom_algokit.policy_loss import ZeroAdvantageRowsInert, make_policy_loss_fn

    batch = make_batch()  # row 1's response is empty: inert whatever its advantages
    batch["advantages"][zeroed] = 0.0
    inert = len(zeroed) + 1
    seen_rows = []

    class CountingLoss(ZeroAdvantageRowsInert):
        def __call__(self, micro_batch, outputs, stats):
            seen_rows.append(len(micro_batch))
            return super().__call__(micro_batch, outputs, stats)

    skipping = CountingLoss(make_policy_loss_fn(PolicyLossConfig()).loss_fn)
    every_row = make_policy_loss_fn(PolicyLossConfig(skip_zero_advantage_rows=False))
    initial = {name: weight.clone() for name, weight in engines(model_dir).named_weights()}
    fast, full = engines(model_dir, micro_batch_size=2), engines(model_dir, micro_batch_size=2)
    fast_metrics, full_metrics = fast.train_step(batch, skipping), full.train_step(batch, every_row)
    assert sum(seen_rows) == max(len(batch) - inert, 1)
    assert fast_metrics["skipped_rows"] == pytest.approx(min(inert, len(batch) - 1) / len(batch))
    assert full_metrics["skipped_rows"] == 0.0
    assert fast_metrics["grad_norm"] == pytest.approx(full_metrics["grad_norm"], rel=1e-5, abs=1e-9)
    fast_weights = dict(fast.named_weights())
    assert_weights_close(fast_weights, dict(full.named_weights()), atol=1e-6)
    assert any(not torch.equal(fast_weights[name], weight) for name, weight in initial.items())  # it did step
