"""The train-step driver on a tiny real engine: a bigram policy (``nn.Linear`` over the previous
token's one-hot) trained with SGD, checked against the full-batch gradient computed directly."""

import math

import pytest
import torch
import torch.distributed as dist
import torch.multiprocessing as mp
import torch.nn.functional as F
from torch.nn.utils import get_total_norm

from rlloom import Batch, MiniBatchStats
from rlloom_enginekit.packing import micro_batches
from rlloom_enginekit.sequences import TRAIN_INPUT_FIELDS
from rlloom_enginekit.train_step import train_step

VOCAB = 5
LR = 0.5


def initial_linear() -> torch.nn.Linear:
    """The engine's model before its first step (and the reference's)."""
    torch.manual_seed(0)
    return torch.nn.Linear(VOCAB, VOCAB)


def bigram_log_probs(linear: torch.nn.Linear, rows: Batch, temperature: float = 1.0) -> torch.Tensor:
    """log p(response token | the token before it) [b, R], 0 on padding."""
    previous = torch.cat([rows["prompts"][:, -1:], rows["responses"][:, :-1]], dim=1)
    logits = linear(F.one_hot(previous, VOCAB).float()) / temperature
    log_probs = logits.log_softmax(-1).gather(-1, rows["responses"][..., None]).squeeze(-1)
    return log_probs * rows["response_mask"]


class PolicyLoss:
    """-(Σ A·log p over the micro-batch's tokens) / the mini-batch's tokens; rows whose advantages
    are all 0 are inert."""

    def __init__(self) -> None:
        self.rows_seen: list[int] = []

    def __call__(self, micro: Batch, outputs: dict, stats: MiniBatchStats):
        self.rows_seen.extend(micro["row"].tolist())
        loss = -(outputs["log_probs"] * micro["advantages"]).sum() / stats.num_tokens
        return loss, {"loss": loss.detach(), "first_row": float(micro["row"][0])}

    def inert_rows(self, batch: Batch) -> torch.Tensor:
        return (batch["advantages"] == 0).all(dim=1)


class BigramEngine:
    """The train-step parts of a one-process (or gloo data-parallel) engine, on the CPU."""

    def __init__(self, micro_rows: int = 2, padding_passes: int = 0) -> None:
        self.model = initial_linear()
        self.optimizer = torch.optim.SGD(self.model.parameters(), lr=LR)
        self.device = torch.device("cpu")
        self.dp_size = dist.get_world_size() if dist.is_initialized() else 1
        self.step = 0
        self.micro_rows = micro_rows
        self.padding_passes = padding_passes
        self.forwards = 0

    def prepare_train(self, batch: Batch) -> None:
        batch.require(*TRAIN_INPUT_FIELDS)
        self.model.train()

    def train_rows(self, batch: Batch) -> Batch:
        return batch

    def train_micro_batches(self, rows: Batch):
        micros = micro_batches(rows, self.micro_rows, None)
        return [(micro, micro) for micro in micros], [micros[0]] * self.padding_passes

    def train_outputs(self, inputs: Batch, temperature: float) -> dict[str, torch.Tensor]:
        self.forwards += 1
        return {"log_probs": bigram_log_probs(self.model, inputs, temperature)}

    def backward(self, loss: torch.Tensor) -> None:
        loss.backward()

    def reduce_over_dp(self, values: list[float], op=dist.ReduceOp.SUM) -> list[float]:
        if self.dp_size == 1:
            return values
        tensor = torch.tensor(values, dtype=torch.float64)
        dist.all_reduce(tensor, op=op)
        return tensor.tolist()

    def lr_at(self, step: int) -> float:
        return LR / step

    def optimizer_step(self, lr: float) -> float:
        if self.dp_size > 1:  # the gradient is the sum over the ranks
            for parameter in self.model.parameters():
                dist.all_reduce(parameter.grad)
        norm = float(get_total_norm([p.grad for p in self.model.parameters()]))
        (group,) = self.optimizer.param_groups
        group["lr"] = lr
        if math.isfinite(norm):
            self.optimizer.step()
        self.optimizer.zero_grad(set_to_none=True)
        return norm

    def extra_sums(self, micros) -> dict[str, float]:
        return {"rows_run": float(sum(len(micro) for micro, _ in micros))}

    def extra_metrics(self, result: dict[str, float], started: float) -> dict[str, float]:
        return {"twice_lr": 2 * result["lr"]}


def make_batch(advantages: list[float], seed: int = 1) -> Batch:
    """Rows of 2 prompt and 3 response tokens (the last row's last token is padding), each row's
    advantage on all its tokens; ``row`` numbers them."""
    rows = len(advantages)
    generator = torch.Generator().manual_seed(seed)
    response_mask = torch.ones(rows, 3)
    response_mask[-1, -1] = 0
    return Batch({
        "prompts": torch.randint(VOCAB, (rows, 2), generator=generator),
        "prompt_mask": torch.ones(rows, 2, dtype=torch.long),
        "responses": torch.randint(VOCAB, (rows, 3), generator=generator),
        "response_mask": response_mask,
        "advantages": torch.tensor(advantages)[:, None] * response_mask,
        "row": torch.arange(rows),
    }, batch_size=rows)


def expected_step(batch: Batch, tokens: float) -> tuple[dict[str, torch.Tensor], float]:
    """Weights after one SGD step at ``LR`` on the whole mini-batch's loss, and the gradient norm."""
    linear = initial_linear()
    loss = -(bigram_log_probs(linear, batch) * batch["advantages"]).sum() / tokens
    loss.backward()
    norm = float(get_total_norm([p.grad for p in linear.parameters()]))
    return {name: (p - LR * p.grad).detach() for name, p in linear.named_parameters()}, norm


def micro_loss(batch: Batch, tokens: float) -> float:
    """The loss of the rows ``batch`` under the initial weights."""
    with torch.no_grad():
        return float(-(bigram_log_probs(initial_linear(), batch) * batch["advantages"]).sum() / tokens)


def test_inert_rows_are_left_out_and_metrics_are_averaged_over_micro_batches():
    batch = make_batch([1.0, 0.0, -2.0, 0.0, 0.5, 3.0])
    engine, loss_fn = BigramEngine(micro_rows=2, padding_passes=1), PolicyLoss()
    result = train_step(engine, batch, loss_fn)

    tokens = float(batch["response_mask"].sum())  # 17: the inert rows count in the stats
    assert loss_fn.rows_seen == [0, 2, 4, 5]
    assert engine.forwards == 2 + 1  # two micro-batches and the padding pass
    kept = batch.reorder(torch.tensor([0, 2, 4, 5]))
    micro_losses = [micro_loss(micro, tokens) for micro in kept.split(2)]
    assert result["loss"] == pytest.approx(sum(micro_losses) / 2, rel=1e-6)
    assert result["first_row"] == (0 + 4) / 2
    assert result["skipped_rows"] == 2 / 6
    assert result["rows_run"] == 4.0
    weights, norm = expected_step(batch, tokens)  # every row: the inert ones add nothing
    assert result["grad_norm"] == pytest.approx(norm, rel=1e-6)
    for name, parameter in engine.model.named_parameters():
        torch.testing.assert_close(parameter.detach(), weights[name], rtol=1e-6, atol=1e-7)
    real_tokens = float(batch["prompt_mask"].sum() + batch["response_mask"].sum())
    assert result["perf/dp_rank_tokens/max"] == result["perf/dp_rank_tokens/min"] == real_tokens


def test_the_metric_names_of_the_contract():
    result = train_step(BigramEngine(), make_batch([1.0, 2.0]), PolicyLoss())
    assert set(result) == {
        "loss", "first_row",  # the loss's
        "grad_norm", "lr", "skipped_update", "skipped_rows", "perf/dp_rank_tokens/max", "perf/dp_rank_tokens/min",
        "rows_run", "twice_lr",  # the engine's own
    }
    assert (result["lr"], result["skipped_update"], result["twice_lr"]) == (LR, 0.0, 2 * LR)


def test_a_non_finite_norm_skips_the_update_but_counts_the_step():
    engine = BigramEngine()
    before = {name: p.detach().clone() for name, p in engine.model.named_parameters()}
    result = train_step(engine, make_batch([1.0, float("nan")]), PolicyLoss())
    assert math.isnan(result["grad_norm"])
    assert (result["skipped_update"], result["lr"], engine.step) == (1.0, LR, 1)
    for name, parameter in engine.model.named_parameters():
        assert torch.equal(parameter.detach(), before[name])
    result = train_step(engine, make_batch([1.0, 2.0]), PolicyLoss())
    assert (result["skipped_update"], result["lr"], engine.step) == (0.0, LR / 2, 2)
    assert not any(torch.equal(p.detach(), before[name]) for name, p in engine.model.named_parameters())


def _two_ranks_worker(rank: int, store_path: str, batch: Batch, out_dir: str) -> None:
    torch.set_num_threads(1)
    dist.init_process_group("gloo", init_method=f"file://{store_path}", rank=rank, world_size=2)
    engine = BigramEngine(micro_rows=2, padding_passes=rank)  # rank 1 has one micro-batch fewer
    local = batch.slice(0, 4) if rank == 0 else batch.slice(4, 6)
    result = train_step(engine, local, PolicyLoss())
    weights = {name: p.detach() for name, p in engine.model.named_parameters()}
    dist.destroy_process_group()
    torch.save({"result": result, "weights": weights}, f"{out_dir}/rank{rank}.pt")


@pytest.mark.timeout(120)  # a collective out of step between the ranks would hang
def test_two_ranks_sum_gradients_and_average_metrics_over_ranks(tmp_path):
    batch = make_batch([1.0, 0.0, -2.0, 0.5, 0.0, 3.0])
    mp.start_processes(_two_ranks_worker, args=(str(tmp_path / "store"), batch, str(tmp_path)), nprocs=2,
                       join=True, start_method="spawn")
    ranks = [torch.load(tmp_path / f"rank{rank}.pt") for rank in range(2)]

    tokens = float(batch["response_mask"].sum())
    weights, norm = expected_step(batch, tokens)
    rank0 = [micro_loss(batch.reorder(torch.tensor(rows)), tokens) for rows in ([0, 2], [3])]
    rank1 = micro_loss(batch.slice(5, 6), tokens)
    for result in (rank["result"] for rank in ranks):
        assert result["loss"] == pytest.approx((sum(rank0) / 2 + rank1) / 2, rel=1e-6)
        assert result["first_row"] == ((0 + 3) / 2 + 5) / 2
        assert result["skipped_rows"] == 2 / 6
        assert result["rows_run"] == 3 + 1
        assert result["grad_norm"] == pytest.approx(norm, rel=1e-6)
        assert result["perf/dp_rank_tokens/max"] == 4 * 2 + 4 * 3
        assert result["perf/dp_rank_tokens/min"] == 2 * 2 + 2 * 3 - 1
    for rank in ranks:
        for name, parameter in rank["weights"].items():
            torch.testing.assert_close(parameter, weights[name], rtol=1e-6, atol=1e-7)
