"""The megatron engine against plain transformers and the fsdp engine on the same weights and batch
(float32 on CPU): log-probs, entropy, loss metrics and the parameters after one AdamW step, and
the critic's values, losses and parameters after two steps, at tensor-parallel size 1 (in this
process), and over two processes on a gloo group as one TP = 2 group or two TP = 1 data-parallel
replicas."""

from __future__ import annotations

import math
import os
import pickle

import pytest
import torch
import torch.distributed as dist
import torch.distributed.checkpoint as dcp
from torch.distributed.checkpoint.format_utils import dcp_to_torch_save
import torch.multiprocessing as mp
from rlloom import Batch, EngineSpec
from rlloom.batch import response_attention
from rlloom.config import ConfigError
from rlloom_fsdp import FSDPConfig, FSDPTrainEngine
from rlloom_megatron import MegatronConfig, cpu_compat
from rlloom_megatron.engine import MegatronTrainEngine
from rlloom_trainer.testing import device_params
from transformers import AutoModelForCausalLM, Qwen2Config, Qwen2ForCausalLM

VOCAB = 300  # not a multiple of 128: the engine pads the vocabulary and masks the padding
# AdamW's first step is lr * g / (|g| + eps): with a tiny eps every weight moves by about ±lr whatever its
# gradient, and a near-zero gradient summed in another order (over TP ranks) can flip sign. eps = 1e-2
# keeps the step proportional to the gradient, so equal parameters after it mean equal gradients.
SETTINGS = dict(lr=1e-3, weight_decay=0.1, eps=1e-2, grad_clip=0.0, micro_batch_size=4)


def tiny_qwen2(path, tie: bool) -> str:
    torch.manual_seed(0)
    config = Qwen2Config(vocab_size=VOCAB, hidden_size=64, intermediate_size=128, num_hidden_layers=2,
                         num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=64,
                         tie_word_embeddings=tie)
    Qwen2ForCausalLM(config).save_pretrained(path)
    return str(path)


@pytest.fixture(scope="module", params=[False, True], ids=["untied", "tied"])
def model_dir(request, tmp_path_factory):
    return tiny_qwen2(tmp_path_factory.mktemp("qwen2"), tie=request.param)


# The two-process cases, each spawning two ranks that import megatron-core: TP = 2 on the untied model (its
# own output layer, cut by vocabulary like the embedding) and DP = 2 on the tied one. TP = 2 with tied
# embeddings runs end to end in tests/test_megatron_e2e.py (preset=tiny's model is tied: it learns, the
# rollout's log-probs match the gathered weights, its checkpoint exports exactly and resumes at TP = 1); the
# box layout of every TP size, tied or not, is test_megatron_checkpoint.py's; DP = 2 is layout-blind.
TWO_PROCESS = [pytest.param(2, False, id="tp2-untied"), pytest.param(1, True, id="dp2-tied")]


@pytest.fixture(scope="module")
def two_rank_runs(tmp_path_factory):
    """``run(tp, tie) -> (model folder, run folder)``: the model and :func:`_two_ranks` spawned on it, once per
    case for the module (the tests of one case read its ranks' results and checkpoint)."""
    done = {}

    def run(tp: int, tie: bool) -> tuple[str, str]:
        if (tp, tie) not in done:
            folder = tmp_path_factory.mktemp(f"two-ranks-tp{tp}")
            model_dir = tiny_qwen2(folder / "model", tie)
            mp.spawn(_two_ranks, args=(str(folder / "store"), model_dir, make_batch(), str(folder), tp), nprocs=2)
            done[tp, tie] = model_dir, str(folder)
        return done[tp, tie]

    return run


@pytest.fixture(autouse=True)
def one_thread():
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


def make_batch(rows: int = 6, prompt_len: int = 5, response_len: int = 7, seed: int = 1) -> Batch:
    """Left-padded prompts of different lengths, right-padded responses (one empty), advantages."""
    g = torch.Generator().manual_seed(seed)
    prompt_lengths = torch.randint(1, prompt_len + 1, (rows,), generator=g)
    response_lengths = torch.randint(1, response_len + 1, (rows,), generator=g)
    response_lengths[1], response_lengths[0] = 0, response_len
    prompt_mask = (torch.arange(prompt_len) >= prompt_len - prompt_lengths[:, None]).long()
    response_mask = (torch.arange(response_len) < response_lengths[:, None]).long()
    return Batch({
        "prompts": torch.randint(0, VOCAB, (rows, prompt_len), generator=g) * prompt_mask,
        "prompt_mask": prompt_mask,
        "responses": torch.randint(0, VOCAB, (rows, response_len), generator=g) * response_mask,
        "response_mask": response_mask,
        "advantages": torch.randn(rows, response_len, generator=g) * response_mask,
    }, meta={"temperature": 0.7})


def reference(path: str, batch: Batch) -> tuple[torch.Tensor, torch.Tensor]:
    """Plain transformers with left padding and position ids: log softmax(logits / T) of the
    response tokens and the entropy, 0 where ``response_mask`` is (padding, an agent's inserted tokens,
    which the model still reads: :func:`rlloom.batch.response_attention`)."""
    model = AutoModelForCausalLM.from_pretrained(path, dtype=torch.float32)
    mask = batch["response_mask"]
    ids = torch.cat([batch["prompts"], batch["responses"]], dim=1)
    attention = torch.cat([batch["prompt_mask"], response_attention(batch)], dim=1)
    with torch.no_grad():
        logits = model(input_ids=ids, attention_mask=attention, position_ids=(attention.cumsum(1) - 1).clamp(min=0)).logits
    start = batch["prompts"].shape[1] - 1
    log_p = torch.log_softmax(logits[:, start:start + mask.shape[1]] / 0.7, dim=-1)
    return log_p.gather(-1, batch["responses"][..., None])[..., 0] * mask, -(log_p.exp() * log_p).sum(-1) * mask


def pg_loss(micro: Batch, outputs, stats):
    per_token = -micro["advantages"] * outputs["log_probs"] - 0.01 * outputs["entropy"]
    loss = (per_token * micro["response_mask"]).sum() / stats.num_tokens
    return loss, {"loss": float(loss.detach())}


def value_loss(micro: Batch, outputs, stats):
    """Squared error of the values against the advantages (as returns), token mean."""
    error = (outputs["values"] - micro["advantages"]) ** 2 * micro["response_mask"]
    loss = error.sum() / stats.num_tokens
    return loss, {"vf_loss": float(loss.detach())}


def critic_run(engine, batch: Batch) -> dict:
    """Two value-loss steps (the first moves only the zero-initialised head), then the values and weights."""
    metrics = [engine.train_step(batch, value_loss) for _ in range(2)]
    return {"metrics": metrics, "values": engine.compute_values(batch)["values"],
            "weights": weights_of(engine)}


def fsdp_critic(path: str, batch: Batch) -> dict:
    engine = FSDPTrainEngine(FSDPConfig(**SETTINGS), EngineSpec(path, "critic", seed=0, total_train_steps=10))
    try:
        return critic_run(engine, batch)
    finally:
        engine.close()


def fsdp_after_one_step(path: str, batch: Batch) -> tuple[dict[str, float], dict[str, torch.Tensor]]:
    engine = FSDPTrainEngine(FSDPConfig(**SETTINGS), EngineSpec(path, "actor", seed=0, total_train_steps=10))
    try:
        metrics = engine.train_step(batch, pg_loss)
        return metrics, weights_of(engine)
    finally:
        engine.close()


def megatron_engine(path: str, tp: int = 1, role: str = "actor", device: str = "cpu",
                    **settings) -> MegatronTrainEngine:
    return MegatronTrainEngine(MegatronConfig(**SETTINGS, **settings, tensor_parallel_size=tp),
                               EngineSpec(path, role, seed=0, total_train_steps=10, device=device))


def weights_of(engine: MegatronTrainEngine) -> dict[str, torch.Tensor]:
    """A copy of the engine's full weights under their Hugging Face names."""
    return {name: tensor.clone() for name, tensor in engine.named_weights()}


def adam_state_size(engine: MegatronTrainEngine) -> tuple[int, int]:
    """``(elements whose AdamW state this rank holds, elements of its parameters)``."""
    holdings = engine._adam_holdings.values()
    held = sum(h.stop - h.start for h in holdings if h.optimizer.state.get(h.key))
    return held, sum(param.numel() for param in engine.model.parameters())


def assert_same_weights(got: dict[str, torch.Tensor], want: dict[str, torch.Tensor], atol: float) -> None:
    assert sorted(got) == sorted(want)
    worst = max(float((got[name] - want[name]).abs().max()) for name in want)
    assert worst < atol, worst


def test_tp1_log_probs_entropy_and_one_step_match_transformers_and_fsdp(model_dir):
    batch = make_batch()
    want_log_probs, want_entropy = reference(model_dir, batch)
    engine = megatron_engine(model_dir)
    try:
        initial = weights_of(engine)
        out = engine.compute_log_probs(batch, entropy=True)
        metrics = engine.train_step(batch, pg_loss)
        stepped = weights_of(engine)
    finally:
        engine.close()
    torch.testing.assert_close(out["log_probs"], want_log_probs, atol=1e-5, rtol=0)
    torch.testing.assert_close(out["entropy"], want_entropy, atol=1e-5, rtol=0)
    hf = AutoModelForCausalLM.from_pretrained(model_dir).state_dict()
    assert_same_weights(initial, {n: t for n, t in hf.items() if n in initial}, atol=0.0 + 1e-30)  # exact load
    fsdp_metrics, fsdp_weights = fsdp_after_one_step(model_dir, batch)
    assert abs(metrics["loss"] - fsdp_metrics["loss"]) < 1e-6
    assert abs(metrics["grad_norm"] - fsdp_metrics["grad_norm"]) < 1e-4 * fsdp_metrics["grad_norm"]
    assert_same_weights(stepped, fsdp_weights, atol=1e-4)
    assert max(float((stepped[n] - initial[n]).abs().max()) for n in initial) > 1e-4  # the step moved them


def agent_batch() -> Batch:
    """:func:`make_batch` as multi-turn trajectories: on rows with 5+ response tokens, tokens 2 and 3 were
    inserted (a tool's answer): read by the model (``response_attention_mask``), not sampled
    (``response_mask`` 0, advantage 0)."""
    batch = make_batch()
    attention = batch["response_mask"].clone()
    inserted = torch.zeros_like(attention, dtype=torch.bool)
    inserted[attention.sum(dim=1) >= 5, 2:4] = True
    batch["response_attention_mask"] = attention
    batch["response_mask"] = attention.masked_fill(inserted, 0)
    batch["advantages"] = batch["advantages"].masked_fill(inserted, 0.0)
    assert inserted.sum() >= 4
    return batch


def test_tp1_multi_turn_rows_read_inserted_tokens_and_train_only_on_sampled_ones(model_dir):
    batch = agent_batch()
    want_log_probs, _ = reference(model_dir, batch)
    engine = megatron_engine(model_dir)
    try:
        out = engine.compute_log_probs(batch)
        metrics = engine.train_step(batch, pg_loss)
        stepped = weights_of(engine)
    finally:
        engine.close()
    torch.testing.assert_close(out["log_probs"], want_log_probs, atol=1e-5, rtol=0)
    fsdp_metrics, fsdp_weights = fsdp_after_one_step(model_dir, batch)  # fsdp's default (packed) layout
    assert abs(metrics["loss"] - fsdp_metrics["loss"]) < 1e-6
    assert_same_weights(stepped, fsdp_weights, atol=1e-4)


def test_tp1_rows_with_zero_advantages_are_left_out_with_the_same_update(model_dir):
    """The policy loss names rows whose advantages are all 0 inert: megatron runs the others only,
    reports the fraction left out, and its step equals one that trains every row."""
    from rlloom_algokit.config import PolicyLossConfig
    from rlloom_algokit.policy_loss import make_policy_loss_fn

    batch = make_batch()
    batch["advantages"][[2, 3]] = 0.0  # with row 1 (an empty response): three inert rows
    results = []
    for skip in (True, False):
        engine = megatron_engine(model_dir)
        try:
            loss_fn = make_policy_loss_fn(PolicyLossConfig(skip_zero_advantage_rows=skip))
            metrics = engine.train_step(batch, loss_fn)
            results.append((metrics, weights_of(engine)))
        finally:
            engine.close()
    (fast_metrics, fast_weights), (full_metrics, full_weights) = results
    assert fast_metrics["skipped_rows"] == pytest.approx(3 / 6) and full_metrics["skipped_rows"] == 0.0
    assert abs(fast_metrics["grad_norm"] - full_metrics["grad_norm"]) < 1e-5 * full_metrics["grad_norm"]
    assert_same_weights(fast_weights, full_weights, atol=1e-6)


def saved_for_backward_bytes(engine: MegatronTrainEngine, batch: Batch) -> int:
    """Bytes of the tensors autograd keeps from a training forward of ``batch`` for its backward."""
    saved = []

    def keep(tensor: torch.Tensor) -> torch.Tensor:
        saved.append(tensor.numel() * tensor.element_size())
        return tensor

    engine.model.train()
    with torch.autograd.graph.saved_tensors_hooks(keep, lambda tensor: tensor):
        engine.train_outputs(batch, temperature=0.7)
    return sum(saved)


def test_tp1_gradient_checkpointing_keeps_less_and_takes_the_same_step(model_dir):
    """train_engine.gradient_checkpointing: megatron-core's full recompute keeps each layer's input
    only (less than half of what the plain forward keeps for backward on this model), and the step
    is the same, bitwise."""
    batch = make_batch()
    results = []
    for recompute in (False, True):
        engine = megatron_engine(model_dir, gradient_checkpointing=recompute)
        try:
            kept = saved_for_backward_bytes(engine, batch)
            metrics = engine.train_step(batch, pg_loss)
            results.append((kept, metrics, weights_of(engine)))
        finally:
            engine.close()
    (plain_kept, plain_metrics, plain_weights), (kept, metrics, weights) = results
    assert kept < 0.5 * plain_kept, (kept, plain_kept)
    assert metrics["loss"] == plain_metrics["loss"] and metrics["grad_norm"] == plain_metrics["grad_norm"]
    assert_same_weights(weights, plain_weights, atol=1e-30)


def assert_same_critic(got: dict, want: dict) -> None:
    for mine, theirs in zip(got["metrics"], want["metrics"]):
        assert abs(mine["vf_loss"] - theirs["vf_loss"]) < 1e-6 and abs(mine["grad_norm"] - theirs["grad_norm"]) < 1e-5
    torch.testing.assert_close(got["values"], want["values"], atol=1e-5, rtol=0)
    assert float(want["values"].abs().max()) > 1e-3  # the head has moved: the values are not all zero
    assert_same_weights(got["weights"], want["weights"], atol=1e-4)


def test_tp1_critic_matches_the_fsdp_critic(model_dir):
    batch = make_batch()
    engine = megatron_engine(model_dir, role="critic")
    try:
        got = critic_run(engine, batch)
    finally:
        engine.close()
    assert "value_head.weight" in got["weights"] and "lm_head.weight" not in got["weights"]
    assert_same_critic(got, fsdp_critic(model_dir, batch))


def report(result: dict, path: str) -> None:
    """The end of a spawned rank: its ``result`` pickled to ``path``, the process group destroyed."""
    with open(path, "wb") as handle:
        pickle.dump(result, handle)
    dist.destroy_process_group()


def _two_ranks(rank: int, store: str, path: str, batch: Batch, out_dir: str, tp: int) -> None:
    """One of two ranks: TP = 2 (one TP group) or TP = 1 (two data-parallel replicas)."""
    torch.set_num_threads(1)
    dist.init_process_group("gloo", init_method=f"file://{store}", rank=rank, world_size=2)
    engine = megatron_engine(path, tp=tp)
    half = len(batch) // 2
    mine = batch.slice(rank * half, (rank + 1) * half)  # what dp_split would hand each rank
    result = {"log_probs": engine.compute_log_probs(mine, entropy=True)}
    result["metrics"] = engine.train_step(mine, pg_loss)
    result["weights"] = weights_of(engine)
    result["adam_elements"], result["elements"] = adam_state_size(engine)
    result["params"] = len(list(engine.model.parameters()))
    engine.save(os.path.join(out_dir, "checkpoint"))
    engine.train_step(mine, pg_loss)  # a second step, to compare with one resumed at TP = 1
    result["second_step"] = weights_of(engine)
    engine.close()
    resumed = megatron_engine(path, tp=tp)  # the same layout resumed: the same second step
    resumed.load(os.path.join(out_dir, "checkpoint"))
    resumed.train_step(mine, pg_loss)
    result["resumed_second_step"] = weights_of(resumed)
    resumed.close()
    critic = megatron_engine(path, tp=tp, role="critic")
    result["critic"] = critic_run(critic, mine)
    critic.close()
    recomputing = megatron_engine(path, tp=tp, gradient_checkpointing=True)
    recomputing.train_step(mine, pg_loss)
    result["recomputed_step"] = weights_of(recomputing)
    recomputing.close()
    report(result, os.path.join(out_dir, f"rank{rank}.pkl"))


@pytest.mark.parametrize("tp, tie", TWO_PROCESS)
def test_two_processes_match_transformers_and_fsdp(two_rank_runs, tp, tie):
    batch = make_batch()
    model_dir, folder = two_rank_runs(tp, tie)
    ranks = [pickle.load(open(os.path.join(folder, f"rank{rank}.pkl"), "rb")) for rank in (0, 1)]
    want_log_probs, want_entropy = reference(model_dir, batch)
    log_probs = torch.cat([r["log_probs"]["log_probs"] for r in ranks])
    entropy = torch.cat([r["log_probs"]["entropy"] for r in ranks])
    torch.testing.assert_close(log_probs, want_log_probs, atol=1e-5, rtol=0)
    torch.testing.assert_close(entropy, want_entropy, atol=1e-5, rtol=0)
    fsdp_metrics, fsdp_weights = fsdp_after_one_step(model_dir, batch)
    for r in ranks:
        assert abs(r["metrics"]["loss"] - fsdp_metrics["loss"]) < 1e-6
        assert abs(r["metrics"]["grad_norm"] - fsdp_metrics["grad_norm"]) < 1e-4 * fsdp_metrics["grad_norm"]
        assert_same_weights(r["weights"], fsdp_weights, atol=1e-4)
    for r in ranks:
        assert_same_weights(r["resumed_second_step"], r["second_step"], atol=1e-6)
        assert_same_weights(r["recomputed_step"], r["weights"], atol=1e-30)  # gradient_checkpointing: the same step
    held = [r["adam_elements"] for r in ranks]
    if tp == 1:  # two DP replicas: megatron-core's distributed optimizer gives each half of AdamW's state
        assert sum(held) == ranks[0]["elements"] and abs(held[0] - held[1]) <= 0.01 * held[0], held
    else:  # one TP group: each rank holds the state of its whole slice
        assert held == [r["elements"] for r in ranks]
    want_critic = fsdp_critic(model_dir, batch)
    for r in ranks:
        assert_same_critic({**r["critic"], "values": torch.cat([x["critic"]["values"] for x in ranks])}, want_critic)


@pytest.mark.parametrize("tp, tie", TWO_PROCESS)
def test_a_two_process_checkpoint_resumes_in_one_process(tmp_path, two_rank_runs, tp, tie):
    """TP = 2: parameters and AdamW moments are recut for TP = 1. DP = 2: the moments, each replica
    holding its share of the elements (the distributed optimizer), are joined in the checkpoint.
    Either way one process resuming from it has every parameter's moments and takes the second step
    the two processes took."""
    batch = make_batch()
    model_dir, folder = two_rank_runs(tp, tie)
    checkpoint = os.path.join(folder, "checkpoint")
    saved = pickle.load(open(os.path.join(folder, "rank0.pkl"), "rb"))
    stored = dcp.FileSystemReader(checkpoint).read_metadata().state_dict_metadata
    for key, tensor in stored.items():  # every value written once: its chunks (one per TP box) cover it exactly
        if hasattr(tensor, "chunks"):
            assert sum(math.prod(chunk.sizes) for chunk in tensor.chunks) == math.prod(tensor.size), key
    assert sum(key.endswith(".exp_avg") for key in stored) == saved["params"]  # every parameter's moments
    dcp_to_torch_save(checkpoint, str(tmp_path / "whole.pt"))  # torch's own reader joins the boxes
    whole = torch.load(tmp_path / "whole.pt", weights_only=True)
    assert torch.equal(whole["model.embedding.word_embeddings.weight"], saved["weights"]["model.embed_tokens.weight"])
    fc1 = whole["model.decoder.layers.1.mlp.linear_fc1.weight"]
    assert torch.equal(fc1[0], saved["weights"]["model.layers.1.mlp.gate_proj.weight"])
    assert torch.equal(fc1[1], saved["weights"]["model.layers.1.mlp.up_proj.weight"])
    engine = megatron_engine(model_dir)
    try:
        engine.load(checkpoint)
        assert_same_weights(weights_of(engine), saved["weights"], atol=1e-30)
        holdings = engine._adam_holdings
        assert engine.step == 1 and len(holdings) == len(list(engine.model.parameters()))
        assert all(h.optimizer.state[h.key]["exp_avg"].abs().sum() > 0 for h in holdings.values())
        engine.train_step(batch, pg_loss)
        assert_same_weights(weights_of(engine), saved["second_step"], atol=1e-5)
    finally:
        engine.close()


def _replicated_state(rank: int, store: str, path: str, batch: Batch, out_dir: str) -> None:
    """DP = 2 with use_distributed_optimizer=false: two steps, a checkpoint after the first, read
    back by engines with the distributed optimizer."""
    torch.set_num_threads(1)
    dist.init_process_group("gloo", init_method=f"file://{store}", rank=rank, world_size=2)
    half = len(batch) // 2
    mine = batch.slice(rank * half, (rank + 1) * half)
    engine = megatron_engine(path, use_distributed_optimizer=False)
    result = {"metrics": engine.train_step(mine, pg_loss)}
    result["weights"] = weights_of(engine)
    result["adam_elements"], result["elements"] = adam_state_size(engine)
    engine.save(os.path.join(out_dir, "replicated"))
    engine.train_step(mine, pg_loss)
    result["second_step"] = weights_of(engine)
    engine.close()
    sharded = megatron_engine(path)
    sharded.load(os.path.join(out_dir, "replicated"))
    sharded.train_step(mine, pg_loss)
    result["sharded_second_step"] = weights_of(sharded)
    sharded.close()
    report(result, os.path.join(out_dir, f"replicated{rank}.pkl"))


@pytest.mark.parametrize("model_dir", [False], ids=["untied"], indirect=True)  # DP = 2 is layout-blind: one model
def test_dp2_without_the_distributed_optimizer_takes_the_same_step_and_resumes_sharded(tmp_path, model_dir):
    """use_distributed_optimizer=false (megatron-core's plain optimizer, gradients all-reduced): every
    replica holds the whole AdamW state, the step is fsdp's, and its checkpoint (each replica offering
    the same boxes) resumes with the distributed optimizer (each replica reading its share) into the
    same second step."""
    batch = make_batch()
    mp.spawn(_replicated_state, args=(str(tmp_path / "store"), model_dir, batch, str(tmp_path)), nprocs=2)
    ranks = [pickle.load(open(tmp_path / f"replicated{rank}.pkl", "rb")) for rank in (0, 1)]
    fsdp_metrics, fsdp_weights = fsdp_after_one_step(model_dir, batch)
    for r in ranks:
        assert r["adam_elements"] == r["elements"]
        assert abs(r["metrics"]["grad_norm"] - fsdp_metrics["grad_norm"]) < 1e-4 * fsdp_metrics["grad_norm"]
        assert_same_weights(r["weights"], fsdp_weights, atol=1e-4)
        assert_same_weights(r["sharded_second_step"], r["second_step"], atol=1e-6)


def _resume_at_tp2(rank: int, store: str, path: str, batch: Batch, checkpoint: str, out_dir: str) -> None:
    torch.set_num_threads(1)
    dist.init_process_group("gloo", init_method=f"file://{store}", rank=rank, world_size=2)
    engine = megatron_engine(path, tp=2)
    engine.load(checkpoint)
    half = len(batch) // 2
    engine.train_step(batch.slice(rank * half, (rank + 1) * half), pg_loss)
    result = {"step": engine.step, "weights": weights_of(engine)}
    engine.close()
    report(result, os.path.join(out_dir, f"tp2_rank{rank}.pkl"))


@pytest.mark.parametrize("model_dir", [False], ids=["untied"], indirect=True)  # the untied model: its output layer too
def test_a_one_process_checkpoint_resumes_at_tp2(tmp_path, model_dir):
    """A TP = 1 checkpoint read by a TP = 2 group (each rank reading its boxes of the stored tensors):
    the same second step as the one process took; the stored tensors have the real vocabulary."""
    batch = make_batch()
    engine = megatron_engine(model_dir)
    try:
        engine.train_step(batch, pg_loss)
        engine.save(str(tmp_path / "checkpoint"))
        engine.train_step(batch, pg_loss)
        want = weights_of(engine)
    finally:
        engine.close()
    stored = dcp.FileSystemReader(str(tmp_path / "checkpoint")).read_metadata().state_dict_metadata
    assert tuple(stored["model.embedding.word_embeddings.weight"].size) == (VOCAB, 64)
    assert tuple(stored["optimizer.decoder.layers.0.mlp.linear_fc1.weight.exp_avg"].size) == (2, 128, 64)
    mp.spawn(_resume_at_tp2, args=(str(tmp_path / "store"), model_dir, batch, str(tmp_path / "checkpoint"),
                                   str(tmp_path)), nprocs=2)
    for rank in (0, 1):
        got = pickle.load(open(tmp_path / f"tp2_rank{rank}.pkl", "rb"))
        assert got["step"] == 2
        assert_same_weights(got["weights"], want, atol=1e-5)


def test_a_checkpoint_of_the_earlier_per_rank_format_is_named(tmp_path, model_dir):
    (tmp_path / "engine_state.json").write_text('{"step": 3, "role": "actor", "tensor_parallel_size": 1}')
    torch.save({}, tmp_path / "tp0.pt")
    engine = megatron_engine(model_dir)
    try:
        with pytest.raises(ConfigError, match=r"per-rank tp<rank>.pt files, .* reads only DCP checkpoints: .*"
                                              r"start the run again in a new trainer.run_dir"):
            engine.load(str(tmp_path))
    finally:
        engine.close()


def test_settings_megatron_cannot_honour_are_named(model_dir):
    with pytest.raises(ValueError, match=r"tensor_parallel_size=2 must divide the number of ranks \(1\); .*"
                                         r"launcher=ray \+launcher.resource_pools.global=2"):
        megatron_engine(model_dir, tp=2)
    assert not dist.is_initialized()  # the group created for it was torn down
    with pytest.raises(ValueError, match=r"tensor_parallel_size=4 must divide .* choose one of \[1, 2\]"):
        megatron_engine(model_dir, tp=4)
    with pytest.raises(ValueError, match="train_engine.tensor_parallel_size=0: must be >= 1"):
        MegatronConfig(tensor_parallel_size=0)
    engine = megatron_engine(model_dir, role="ref")  # the failed engines released what they acquired
    try:
        with pytest.raises(RuntimeError, match="frozen reference"):
            engine.train_step(make_batch(), pg_loss)
        with pytest.raises(RuntimeError, match="serves log-probs"):
            engine.compute_values(make_batch())
    finally:
        engine.close()


@pytest.mark.parametrize("device", device_params("bf16 autocast on CUDA vs fp32 CPU log-probs, offload and a step"))
def test_device_default_precision_against_fp32_reference(model_dir, device):
    """dtype=auto: float32 on CPU (exact to 1e-5), bf16 compute over float32 weights on CUDA (within
    bf16's rounding: 0.05 per log-prob on this tiny model); offload frees the GPU memory (CUDA) and
    the steps after it are those of an engine never offloaded. megatron-core's own allocations (DDP's
    gradient buffer, RoPE's frequencies) follow the engine's device, through the CPU layer on CPU
    whatever the host has; on a host with a GPU an engine on the other device is refused meanwhile."""
    batch = make_batch()
    want_log_probs, _ = reference(model_dir, batch)
    engine = megatron_engine(model_dir, device=device)
    steady = megatron_engine(model_dir, device=device)
    try:
        assert cpu_compat.active() == (device == "cpu")
        assert {buffer.grad_data.device.type for buffer in engine.ddp.buffers} == {device}
        if torch.cuda.is_available():  # (without one, an engine on cuda:0 is refused by resolve_device first)
            other = "cuda:0" if device == "cpu" else "cpu"
            with pytest.raises(RuntimeError, match=f"a Megatron engine on {other} cannot run beside"):
                megatron_engine(model_dir, device=other)
        assert next(engine.model.parameters()).dtype == torch.float32
        out = engine.compute_log_probs(batch)
        assert engine.model.rotary_pos_emb.inv_freq.device.type == device  # megatron-core moves it at the first forward
        tolerance = 1e-5 if device == "cpu" else 0.05
        torch.testing.assert_close(out["log_probs"], want_log_probs, atol=tolerance, rtol=0)
        for _ in range(2):
            engine.train_step(batch, pg_loss)
            steady.train_step(batch, pg_loss)
            held = torch.cuda.memory_allocated(device) if device == "cuda" else 0
            engine.offload()
            if device == "cuda":  # parameters, AdamW state and gradient buffer: at least 3 copies of the weights
                weights = sum(param.numel() * 4 for param in engine.model.parameters())
                assert held - torch.cuda.memory_allocated(device) >= 3 * weights
        metrics = engine.train_step(batch, pg_loss)  # brings the weights back by itself
        assert math.isfinite(metrics["grad_norm"]) and metrics["grad_norm"] > 0
        steady.train_step(batch, pg_loss)
        assert_same_weights(dict(engine.named_weights()), dict(steady.named_weights()), atol=1e-6)
    finally:
        engine.close()
        steady.close()
    assert not cpu_compat.active()  # the last engine gone, the process is free for either device
