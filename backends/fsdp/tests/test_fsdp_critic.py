"""The fsdp engine's critic role against an independent plain-transformers value model.

References take the tiny Qwen2's base transformer (``Qwen2ForCausalLM.model``), read its last hidden
states at positions P-1 … P+R-2 and apply the value head's weight and bias by hand; AdamW updates
are written from the formula.
"""

from __future__ import annotations

import pytest
import torch
import torch.distributed as dist
import torch.multiprocessing as mp
from test_fsdp_engine import (  # noqa: F401 - fixtures are used by name
    EPS,
    LR,
    assert_weights_close,
    engines,
    make_batch,
    model_dir,
    one_thread,
    reference_model,
)

from rlloom import Batch, EngineSpec
from rlloom_fsdp import FSDPConfig, FSDPTrainEngine

CRITIC_LR = 3e-2
WEIGHT_DECAY = 0.1
HEAD = ("value_head.weight", "value_head.bias")


def reference_values(base, weight, bias, batch: Batch) -> torch.Tensor:
    """w·h + b at the hidden state that predicts each response token; 0 on padding."""
    prompts, mask = batch["prompts"], batch["response_mask"]
    attention_mask = torch.cat([batch["prompt_mask"], mask], dim=1)
    hidden = base(
        input_ids=torch.cat([prompts, batch["responses"]], dim=1),
        attention_mask=attention_mask,
        position_ids=(attention_mask.cumsum(1) - 1).clamp(min=0),
    ).last_hidden_state
    start = prompts.shape[1] - 1
    return (hidden[:, start : start + mask.shape[1]] @ weight.T + bias).squeeze(-1) * mask


def targets(batch: Batch) -> torch.Tensor:
    """Value targets for the hand-written loss: a fixed pattern over rows and positions."""
    rows, length = batch["response_mask"].shape
    return torch.linspace(-1.0, 1.0, rows * length).view(rows, length)


def mse_loss(micro: Batch, outputs, stats):
    """½ (v − target)², token-mean over the mini-batch (this micro-batch's share)."""
    per_token = 0.5 * (outputs["values"] - micro["targets"]).square()
    loss = (per_token * micro["response_mask"]).sum() / stats.num_tokens
    return loss, {"vf_share": float(loss.detach())}


def with_targets(batch: Batch) -> Batch:
    batch["targets"] = targets(batch)
    return batch


def critic(engines, model_dir, **overrides):  # noqa: F811 - model_dir is the fixture's value
    return engines(model_dir, role="critic", critic_lr=CRITIC_LR, **overrides)


def reference_adamw_training(path: str, batch: Batch, steps: int) -> dict[str, torch.Tensor]:
    """``steps`` AdamW steps (lr CRITIC_LR, decoupled weight decay, bias-corrected moments) on the
    token-mean MSE of a plain base model + zero head, written from the formula."""
    base = reference_model(path).model
    weight = torch.zeros(1, base.config.hidden_size, requires_grad=True)
    bias = torch.zeros(1, requires_grad=True)
    params = {f"model.{name}": p for name, p in base.named_parameters()}
    params.update({HEAD[0]: weight, HEAD[1]: bias})
    moments = {name: (torch.zeros_like(p), torch.zeros_like(p)) for name, p in params.items()}
    mask = batch["response_mask"]
    b1, b2 = 0.9, 0.999
    for step in range(1, steps + 1):
        values = reference_values(base, weight, bias, batch)
        loss = (0.5 * (values - batch["targets"]).square() * mask).sum() / mask.sum()
        for p in params.values():
            p.grad = None
        loss.backward()
        with torch.no_grad():
            for name, p in params.items():
                m, v = moments[name]
                m.mul_(b1).add_((1 - b1) * p.grad)
                v.mul_(b2).add_((1 - b2) * p.grad * p.grad)
                m_hat, v_hat = m / (1 - b1**step), v / (1 - b2**step)
                p.mul_(1 - CRITIC_LR * WEIGHT_DECAY).sub_(CRITIC_LR * m_hat / (v_hat.sqrt() + EPS))
    return {name: p.detach().clone() for name, p in params.items()}


# ---------------------------------------------------------------------------------- values
def test_critic_values_equal_base_hidden_states_times_head(model_dir, engines):  # noqa: F811
    engine = critic(engines, model_dir)
    batch = with_targets(make_batch())
    fresh = engine.compute_values(batch)
    assert list(fresh.keys()) == ["values"]
    assert fresh["values"].dtype == torch.float32 and fresh["values"].shape == (6, 7)
    assert torch.all(fresh["values"] == 0)  # the head starts at zero
    engine.train_step(batch, mse_loss)  # now the head and the base weights have moved
    weights = dict(engine.named_weights())
    assert list(weights)[-2:] == list(HEAD)
    assert weights[HEAD[0]].shape == (1, 64) and weights[HEAD[1]].shape == (1,)
    assert "lm_head.weight" not in weights

    base = reference_model(model_dir).model
    missing = base.load_state_dict({n[len("model."):]: t for n, t in weights.items() if n not in HEAD})
    assert missing.missing_keys == [] and missing.unexpected_keys == []
    with torch.no_grad():
        expected = reference_values(base, weights[HEAD[0]], weights[HEAD[1]], batch)
    values = engine.compute_values(batch)["values"]
    assert values.abs().max() > 1e-3
    torch.testing.assert_close(values, expected, atol=1e-5, rtol=0)
    assert torch.all(values[1] == 0)  # empty response


def test_critic_train_step_equals_hand_written_adamw(model_dir, engines):  # noqa: F811
    batch = with_targets(make_batch())
    engine = critic(engines, model_dir, lr=1e-9, weight_decay=WEIGHT_DECAY)  # the critic must use critic_lr
    metrics = [engine.train_step(batch, mse_loss) for _ in range(2)]
    assert [m["lr"] for m in metrics] == pytest.approx([CRITIC_LR, CRITIC_LR])
    expected = reference_adamw_training(model_dir, batch, steps=2)
    assert_weights_close(dict(engine.named_weights()), expected, atol=2e-5)
    mask, target = batch["response_mask"], batch["targets"]
    first_loss = float((0.5 * target.square() * mask).sum() / mask.sum())  # values are 0 before step 1
    assert metrics[0]["vf_share"] == pytest.approx(first_loss / 2, rel=1e-5)  # mean of two micro-batch shares


def test_critic_micro_batch_size_does_not_change_results(model_dir, engines):  # noqa: F811
    batch = with_targets(make_batch())
    small, large = critic(engines, model_dir, micro_batch_size=1), critic(engines, model_dir, micro_batch_size=4)
    for engine in (small, large):
        engine.train_step(batch, mse_loss)
    torch.testing.assert_close(
        small.compute_values(batch)["values"], large.compute_values(batch)["values"], atol=1e-6, rtol=0
    )
    small_metrics, large_metrics = small.train_step(batch, mse_loss), large.train_step(batch, mse_loss)
    assert small_metrics["grad_norm"] == pytest.approx(large_metrics["grad_norm"], rel=1e-5)
    # The second AdamW step divides gradients that differ by float32 summation order (~1e-7
    # relative) by their running RMS, then scales by CRITIC_LR: measured 1.1e-6 apart with
    # torch 2.13 + transformers 5.19 on one thread; a real difference would be ~CRITIC_LR.
    assert_weights_close(dict(small.named_weights()), dict(large.named_weights()), atol=3e-6)


# ---------------------------------------------------------------------------------- roles, checkpoints, config
def test_critic_refuses_log_probs_and_the_actor_refuses_values(model_dir, engines):  # noqa: F811
    batch = make_batch()
    with pytest.raises(RuntimeError, match="role 'critic'.*no LM head"):
        critic(engines, model_dir).compute_log_probs(batch)
    with pytest.raises(RuntimeError, match="role 'actor'.*only role 'critic' has a value head"):
        engines(model_dir).compute_values(batch)


def test_critic_save_load_restores_head_and_optimizer(model_dir, engines, tmp_path):  # noqa: F811
    batches = [with_targets(make_batch(seed=s)) for s in range(3)]
    engine = critic(engines, model_dir)
    engine.train_step(batches[0], mse_loss)
    engine.save(str(tmp_path / "critic"))
    saved = dict(engine.named_weights())
    first = [engine.train_step(b, mse_loss) for b in batches[1:]]
    after = dict(engine.named_weights())
    assert not torch.equal(after[HEAD[0]], saved[HEAD[0]])

    resumed = critic(engines, model_dir)
    resumed.load(str(tmp_path / "critic"))
    assert_weights_close(dict(resumed.named_weights()), saved, atol=0)
    assert [resumed.train_step(b, mse_loss) for b in batches[1:]] == first
    assert_weights_close(dict(resumed.named_weights()), after, atol=0)
    with pytest.raises(ValueError, match="role 'critic'; an engine with role 'actor'"):
        engines(model_dir).load(str(tmp_path / "critic"))


def test_critic_lr_defaults_to_lr_and_is_validated(model_dir, engines):  # noqa: F811
    assert engines(model_dir, role="critic").train_step(with_targets(make_batch()), mse_loss)["lr"] == LR
    with pytest.raises(ValueError, match=r"train_engine\.critic_lr=-1\.0: must be in \[0, inf\) \(or null\)"):
        FSDPConfig(critic_lr=-1.0)


# ---------------------------------------------------------------------------------- world size 2
def _critic_world_size_2_worker(rank: int, store_path: str, model_dir: str, batch: Batch, out_dir: str) -> None:
    torch.set_num_threads(1)
    dist.init_process_group("gloo", init_method=f"file://{store_path}", rank=rank, world_size=2)
    engine = FSDPTrainEngine(
        FSDPConfig(lr=LR, critic_lr=CRITIC_LR, weight_decay=0.1, eps=EPS, grad_clip=0.0, micro_batch_size=2),
        EngineSpec(model_dir, "critic", total_train_steps=10),
    )
    local = batch.chunk(2)[rank]  # 3 rows (2 micro-batches) on rank 0, 2 rows (1 + a padding pass) on rank 1
    metrics = [engine.train_step(local, mse_loss) for _ in range(2)]
    values = engine.compute_values(local)["values"]
    weights = dict(engine.named_weights())
    engine.close()
    dist.destroy_process_group()
    torch.save({"metrics": metrics, "values": values, "weights": weights}, f"{out_dir}/rank{rank}.pt")


@pytest.mark.slow
@pytest.mark.timeout(300)  # a collective out of step between the ranks would hang
def test_critic_world_size_2_matches_world_size_1(model_dir, engines, tmp_path):  # noqa: F811
    batch = with_targets(make_batch(rows=5))
    single = critic(engines, model_dir, micro_batch_size=2)
    expected_metrics = [single.train_step(batch, mse_loss) for _ in range(2)]
    expected_values = single.compute_values(batch)["values"]
    expected_weights = dict(single.named_weights())

    mp.start_processes(
        _critic_world_size_2_worker,
        args=(str(tmp_path / "store"), model_dir, batch, str(tmp_path)),
        nprocs=2,
        join=True,
        start_method="spawn",
    )
    ranks = [torch.load(tmp_path / f"rank{rank}.pt") for rank in range(2)]
    for result in ranks:
        for got, want in zip(result["metrics"], expected_metrics):
            assert got["grad_norm"] == pytest.approx(want["grad_norm"], rel=1e-5)
        assert_weights_close(result["weights"], expected_weights, atol=1e-5)
    torch.testing.assert_close(torch.cat([r["values"] for r in ranks]), expected_values, atol=1e-5, rtol=0)
